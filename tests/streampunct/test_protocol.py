"""Decoding and encoding of protocol messages (no sockets)."""

from __future__ import annotations

import json

import pytest

from streampunct.core.wire import (
    ConfigApplied,
    ConfigRequest,
    Ended,
    EndRequest,
    Error,
    ErrorCode,
    Final,
    Flushed,
    FlushRequest,
    Limits,
    Partial,
    ProtocolError,
    PunctuatedWord,
    Ready,
    SessionOptions,
    Word,
    WordsMessage,
    decode,
    decode_server,
    encode,
)


def test_decode_each_client_message():
    assert decode('{"type": "flush"}') == FlushRequest()
    assert decode('{"type": "end", "extra": 1}') == EndRequest()
    assert decode('{"type": "config"}') == ConfigRequest()
    assert decode(
        '{"type": "config", "right_context": 3, "max_delay_ms": 0, "partials": true, "capitalize": false}'
    ) == ConfigRequest(3, 0, True, False)
    message = decode('{"type": "words", "words": ["hello,", {"w": "World", "start": 1, "end": 1.5}, {"w": "x"}]}')
    assert message == WordsMessage((Word("hello,"), Word("World", 1.0, 1.5), Word("x")))


def test_unknown_fields_are_ignored():
    assert decode('{"type": "words", "words": [], "lang": "en", "seq": 4}') == WordsMessage(())


@pytest.mark.parametrize(
    "frame",
    [
        "not json",
        "{",
        "[1, 2]",
        '"words"',
        "{}",
        '{"type": 3}',
        '{"type": "hello"}',
        '{"type": "words"}',
        '{"type": "words", "words": "hello"}',
        '{"type": "words", "words": [1]}',
        '{"type": "words", "words": [null]}',
        '{"type": "words", "words": [{"word": "x"}]}',
        '{"type": "words", "words": [{"w": 5}]}',
        '{"type": "words", "words": [{"w": "x", "start": "0"}]}',
        '{"type": "words", "words": [{"w": "x", "end": true}]}',
        '{"type": "config", "right_context": "2"}',
        '{"type": "config", "right_context": 2.0}',
        '{"type": "config", "right_context": true}',
        '{"type": "config", "right_context": -1}',
        '{"type": "config", "right_context": 1001}',
        '{"type": "config", "max_delay_ms": -5}',
        '{"type": "config", "max_delay_ms": 1e9}',
        '{"type": "config", "partials": 1}',
        '{"type": "config", "capitalize": "yes"}',
        # null is not "absent": an option, when sent, must have its type
        '{"type": "config", "right_context": null}',
        '{"type": "config", "max_delay_ms": null}',
        '{"type": "config", "partials": null}',
        '{"type": "config", "capitalize": null}',
        b'{"type": "flush"}',
    ],
)
def test_bad_request(frame):
    with pytest.raises(ProtocolError) as info:
        decode(frame)
    assert info.value.code is ErrorCode.BAD_REQUEST
    assert info.value.message


@pytest.mark.parametrize("name, rule", [("right_context", "'right_context' must be an integer between 0 and 1000"),
                                        ("partials", "'partials' must be true or false"),
                                        ("lexicon", "'lexicon' must be a list of [spoken, written] string pairs")])
def test_an_option_sent_as_null_is_refused_with_what_to_do(name, rule):
    """Serializers that write unset fields as null (Jackson's default, Go's nil pointers) are
    told to leave the field out; null is still not "absent"."""
    for frame in (f'{{"type": "config", "{name}": null}}',
                  f'{{"type": "resume", "start": 0, "context": [], "config": {{"{name}": null}}}}'):
        with pytest.raises(ProtocolError) as info:
            decode(frame)
        assert info.value.code is ErrorCode.BAD_REQUEST
        assert info.value.message.endswith(f"{rule}, not null (leave '{name}' out to keep its value)")


@pytest.mark.parametrize(
    "frame, message",
    [
        ('{"type": "words", "n": ' + "9" * 5000 + "}", "invalid JSON: a number in the frame is too long"),
        ('{"type": "config", "right_context": -' + "1" * 5000 + "}",
         "invalid JSON: a number in the frame is too long"),
        ('{"type": "words", "words": ' + "[" * 100_000 + "]" * 100_000 + "}",
         "invalid JSON: the frame nests too deeply"),
        ('{"type": "config", "x": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001,
         "invalid JSON: the frame nests too deeply"),
    ],
)
def test_frames_past_pythons_parser_limits_get_a_plain_message(frame, message):
    """Python's own messages (its digit limit, its recursion depth) name its internals."""
    with pytest.raises(ProtocolError) as info:
        decode(frame)
    assert info.value.code is ErrorCode.BAD_REQUEST
    assert info.value.message == message


def test_numbers_within_the_digit_limit_and_nesting_still_decode():
    frame = '{"type": "config", "right_context": 7, "extra": [[[' + "1" * 4000 + "]]]}"
    assert decode(frame) == ConfigRequest(right_context=7)
    with pytest.raises(ProtocolError) as info:
        decode('{"type": "config", "right_context": ' + "1" * 4000 + "}")
    assert info.value.message == "'right_context' must be between 0 and 1000, not an integer of 4000 digits"


def test_too_large():
    limits = Limits(max_words_per_message=5, max_word_chars=10)
    assert len(decode(json.dumps({"type": "words", "words": ["a"] * 5}), limits).words) == 5
    with pytest.raises(ProtocolError) as info:
        decode(json.dumps({"type": "words", "words": ["a"] * 6}), limits)
    assert info.value.code is ErrorCode.TOO_LARGE and "6 words" in info.value.message
    with pytest.raises(ProtocolError) as info:
        decode(json.dumps({"type": "words", "words": ["a", {"w": "b" * 11}]}), limits)
    assert info.value.code is ErrorCode.TOO_LARGE and "words[1]" in info.value.message


def test_default_limits_reject_ten_thousand_words_and_a_megabyte_word():
    with pytest.raises(ProtocolError) as info:
        decode(json.dumps({"type": "words", "words": ["a"] * 10_000}))
    assert info.value.code is ErrorCode.TOO_LARGE
    with pytest.raises(ProtocolError) as info:
        decode(json.dumps({"type": "words", "words": ["x" * 1_000_000]}))
    assert info.value.code is ErrorCode.TOO_LARGE


def test_config_request_applies_only_given_fields():
    base = SessionOptions(right_context=2, max_delay_ms=1500, partials=False, capitalize=False)
    assert ConfigRequest(right_context=5).apply_to(base) == SessionOptions(5, 1500, False, False)
    assert ConfigRequest(partials=True, capitalize=True).apply_to(base) == SessionOptions(2, 1500, True, True)
    assert ConfigRequest().apply_to(base) == base


SERVER_MESSAGES = [
    Ready("abc", "model-x", SessionOptions(4, 300, True, False)),
    ConfigApplied(SessionOptions(0, 0, False, True)),
    Final(3, (PunctuatedWord("hello", ","), PunctuatedWord("world", ".")), "hello, world."),
    Partial(5, (PunctuatedWord("so", ""),), "so"),
    Flushed(12),
    Ended(12),
    Error(ErrorCode.TOO_LARGE, "too many words"),
    Ready("abc", "model-x", SessionOptions(4, 300, True, False), limits=Limits(50, 64, 100, 5000)),
]


@pytest.mark.parametrize("message", SERVER_MESSAGES, ids=lambda m: m.type)
def test_server_messages_round_trip(message):
    text = encode(message)
    obj = json.loads(text)
    assert obj["type"] == message.type
    assert decode_server(text) == message


def test_server_message_wire_shapes():
    assert json.loads(encode(SERVER_MESSAGES[0])) == {
        "type": "ready", "protocol": 1, "session": "abc", "model": "model-x",
        "config": {"right_context": 4, "max_delay_ms": 300, "partials": True, "capitalize": False,
                   "itn": False, "lexicon": []},
    }
    assert json.loads(encode(SERVER_MESSAGES[2])) == {
        "type": "final", "start": 3, "words": [{"w": "hello", "p": ","}, {"w": "world", "p": "."}],
        "text": "hello, world.",
    }
    assert json.loads(encode(Error(ErrorCode.INTERNAL, "boom"))) == {
        "type": "error", "code": "internal", "message": "boom",
    }
    assert json.loads(encode(SERVER_MESSAGES[-1]))["limits"] == {
        "max_words_per_message": 50, "max_word_chars": 64, "max_right_context": 100, "max_delay_ms": 5000,
        "max_lexicon_pairs": 1000, "max_lexicon_chars": 50_000,
    }
    # A server that sends no limits (or a client reading an older server): None, the defaults apply.
    assert decode_server(encode(SERVER_MESSAGES[0])).limits is None
    with pytest.raises(ProtocolError, match="limits"):
        decode_server('{"type": "ready", "protocol": 1, "session": "s", "model": "m", "limits": {"max_words_per_message": 0},'
                      ' "config": {"right_context": 1, "max_delay_ms": 1, "partials": false, "capitalize": false}}')


@pytest.mark.parametrize(
    "message",
    [ConfigRequest(right_context=1, partials=True), WordsMessage((Word("a"), Word("b", 0.5, None))),
     FlushRequest(), EndRequest()],
    ids=lambda m: m.type,
)
def test_client_messages_round_trip(message):
    assert decode(encode(message)) == message


def test_client_tolerates_new_error_codes():
    message = decode_server('{"type": "error", "code": "rate_limited", "message": "slow down"}')
    assert isinstance(message, Error) and message.code == "rate_limited"


def test_docs_protocol_starts_with_the_shared_contract():
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    shared = repo.parent / "shared" / "docs" / "protocol.md"
    if not shared.is_file():
        pytest.skip(f"needs {shared}")
    ours = (repo / "docs" / "protocol.md").read_text(encoding="utf-8")
    assert ours.startswith(shared.read_text(encoding="utf-8")), "docs/protocol.md drifted from the shared protocol"


def test_hypothesis_message_decodes_like_words():
    from streampunct.core.wire import NULL_TIME, HypothesisMessage

    message = decode('{"type": "hypothesis", "words": ["so", {"w": "How", "start": 1, "end": null}]}')
    assert message == HypothesisMessage((Word("so"), Word("How", 1, NULL_TIME)))
    assert decode('{"type": "hypothesis", "words": []}') == HypothesisMessage(())
    assert decode(encode(message)) == message
    with pytest.raises(ProtocolError) as info:
        decode(json.dumps({"type": "hypothesis", "words": ["a"] * 1001}))
    assert info.value.code is ErrorCode.TOO_LARGE


@pytest.mark.parametrize(
    "frame",
    [
        '{"type": "hypothesis"}',
        '{"type": "hypothesis", "words": null}',
        '{"type": "hypothesis", "words": [7]}',
        '{"type": "hypothesis", "words": [{"w": "x", "start": "1"}]}',
        '{"type": "words", "words": [{"w": "x", "start": NaN}]}',
        '{"type": "words", "words": [{"w": "x", "end": Infinity}]}',
    ],
)
def test_bad_hypothesis_and_times(frame):
    with pytest.raises(ProtocolError) as info:
        decode(frame)
    assert info.value.code is ErrorCode.BAD_REQUEST


def test_partial_hypothesis_and_final_times_on_the_wire():
    partial = Partial(2, (PunctuatedWord("so", ""),), "so how,", (PunctuatedWord("how", ","),))
    assert json.loads(encode(partial)) == {
        "type": "partial", "start": 2, "words": [{"w": "so", "p": ""}],
        "hypothesis": [{"w": "how", "p": ","}], "text": "so how,",
    }
    assert decode_server(encode(partial)) == partial
    # A partial from a server that predates hypotheses still decodes.
    assert decode_server('{"type": "partial", "start": 0, "words": [], "text": ""}') == Partial(0, (), "")
    final = Final(0, (PunctuatedWord("so", ",", 0.5, 0.75), PunctuatedWord("well", ".", None, 2)), "so, well.")
    assert json.loads(encode(final))["words"] == [
        {"w": "so", "p": ",", "start": 0.5, "end": 0.75}, {"w": "well", "p": ".", "end": 2},
    ]
    assert decode_server(encode(final)) == final


def test_a_key_given_twice_counts_with_its_last_value():
    assert decode('{"type": "words", "type": "flush"}') == FlushRequest()
    assert decode('{"type": "config", "right_context": 9, "right_context": 2}') == ConfigRequest(right_context=2)
