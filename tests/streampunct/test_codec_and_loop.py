"""The frames' JSON (orjson, else the standard library: :mod:`streampunct.core.codec`) and the
server's event loop (uvloop, else asyncio's: :mod:`streampunct.server.event_loop`).

Both fast paths must leave the wire as it was: every server message parses to the same JSON
values, every client frame decodes to the same message or is refused with the same code and
reason, and a real session sends the same frames, whichever codec and loop run it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.client import connect

from engines.fake import FakeEngine
from streampunct.cli import main
from streampunct.core import codec, wire
from streampunct.core.options import SessionOptions
from streampunct.core.windowing import WindowConfig
from streampunct.core.wire import (
    ConfigApplied,
    Ended,
    Error,
    ErrorCode,
    Final,
    Flushed,
    Limits,
    Partial,
    ProtocolError,
    PunctuatedWord,
    Ready,
    Resumed,
    decode,
    decode_server,
    encode,
    encode_frame,
)
from streampunct.server.event_loop import EventLoop, loop_factory, loop_name, resolve

orjson = pytest.importorskip("orjson")
uvloop = pytest.importorskip("uvloop")


@pytest.fixture(autouse=True)
def python_recursion_limit():
    """Python's own recursion limit, whatever ran before: ``json`` refuses frames nested past
    it, and importing NeMo's grammars (tests/streampunct/test_itn.py) raises it to 3000."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(before)


@pytest.fixture
def stdlib_json(monkeypatch):
    """The codec without orjson: the standard library's json (what the wire was before)."""
    monkeypatch.setattr(codec, "orjson", None)


@pytest.fixture
def no_uvloop(monkeypatch):
    """uvloop as if it were not installed."""
    monkeypatch.setitem(sys.modules, "uvloop", None)


def with_codec(use_orjson: bool, fn, *args):
    """``fn(*args)`` with orjson, or with the standard library's json."""
    saved = codec.orjson
    codec.orjson = saved if use_orjson else None
    try:
        return fn(*args)
    finally:
        codec.orjson = saved


def typed(value):
    """JSON values with their Python types and key order (1 and 1.0, 0.0 and -0.0 differ)."""
    if isinstance(value, dict):
        return [(k, typed(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [typed(v) for v in value]
    return type(value).__name__, repr(value)


def stdlib_text(message) -> str:
    """The frame's text as the server wrote it before orjson."""
    return json.dumps(message.to_json(), ensure_ascii=False, separators=(",", ":"))


OPTIONS = SessionOptions(right_context=2, max_delay_ms=1500, partials=True, capitalize=True, itn=False,
                         lexicon=(("new york", "New York"), ("i phone", "iPhone")))
ODD_WORDS = (
    PunctuatedWord("caf\u00e9", ","), PunctuatedWord("\U0001f600", ""), PunctuatedWord('say "hi"', "."),
    PunctuatedWord("back\\slash", "?"), PunctuatedWord("line\u2028sep", ""), PunctuatedWord("\x00\x1f", ""),
)
#: One of each server message; none holds a value orjson leaves to json.
PLAIN_MESSAGES = [
    Ready("s-1", "fake-model", OPTIONS, limits=Limits(max_context_words=100)),
    Ready("s-2", "fake-model", OPTIONS, itn_available=False),
    ConfigApplied(OPTIONS),
    Resumed(12, SessionOptions(), itn_available=False),
    Final(0, (PunctuatedWord("so", ""), PunctuatedWord("this", ",", 0.5, 0.9)), "So this,"),
    Final(7, (PunctuatedWord("t", ".", 3, 4), PunctuatedWord("u", "", 1e16, 1.5e-7),
              PunctuatedWord("v", "", 0.1, 2 ** 63), PunctuatedWord("w", "", -0.0, 5e-324)), "T. u v w"),
    Final(2, ODD_WORDS, " ".join(w.w + w.p for w in ODD_WORDS)),
    Partial(4, (PunctuatedWord("how", ","),), "how, are you", (PunctuatedWord("are", ""), PunctuatedWord("you", "?"))),
    Partial(9, (), "", ()),
    Flushed(9),
    Ended(12),
    Error(ErrorCode.BAD_REQUEST, "invalid JSON: Expecting value: line 1 column 1 (char 0)"),
    Error("future_code", "a code newer than this client"),
]
#: Messages that hold what orjson refuses or writes otherwise: json writes them.
FALLBACK_MESSAGES = [
    Final(0, (PunctuatedWord("big", ".", 10 ** 20, 2 ** 64),), "Big."),  # echoed times past 64 bits
    Final(0, (PunctuatedWord("null", "."),), "Null."),  # 'null' in orjson's bytes: json's text
]


@pytest.mark.parametrize("message", PLAIN_MESSAGES + FALLBACK_MESSAGES, ids=lambda m: m.type)
def test_every_server_message_parses_to_the_same_json_values(message):
    reference = typed(json.loads(stdlib_text(message)))
    fast = with_codec(True, encode_frame, message)
    assert typed(json.loads(fast)) == reference
    assert typed(json.loads(with_codec(False, encode_frame, message))) == reference
    assert with_codec(False, encode_frame, message) == stdlib_text(message)  # the stdlib: as before
    for use_orjson in (True, False):  # encode() stays str (clients send it); the client decodes it alike
        text = with_codec(use_orjson, encode, message)
        assert isinstance(text, str) and typed(json.loads(text)) == reference
        assert with_codec(use_orjson, decode_server, text) == decode_server(stdlib_text(message))


@pytest.mark.parametrize("message", PLAIN_MESSAGES, ids=lambda m: m.type)
def test_orjson_bytes_go_out_for_plain_messages(message):
    assert isinstance(with_codec(True, encode_frame, message), bytes)
    assert isinstance(with_codec(False, encode_frame, message), str)


@pytest.mark.parametrize("message", FALLBACK_MESSAGES, ids=["big-integers", "null-word"])
def test_what_orjson_refuses_or_writes_otherwise_is_written_by_json(message):
    assert with_codec(True, encode_frame, message) == stdlib_text(message)


def test_dumps_leaves_nan_subclasses_and_lone_surrogates_to_json():
    class Text(str):
        pass

    for value in ([float("nan"), float("inf"), None], [2 ** 64, -(2 ** 63) - 1], ["a\ud800b"], [Text("x")],
                  {1: "int key"}):
        assert codec.dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    with pytest.raises(TypeError):  # json refuses a dataclass: orjson must not quietly write it
        codec.dumps({"config": OPTIONS})


def test_the_codec_says_which_library_runs(stdlib_json):
    assert codec.name() == "json"


def test_ordinary_frames_take_the_fast_path(monkeypatch):
    calls = []

    class Spy:
        JSONDecodeError = orjson.JSONDecodeError
        OPT_PASSTHROUGH_SUBCLASS = orjson.OPT_PASSTHROUGH_SUBCLASS

        @staticmethod
        def loads(text):
            calls.append("loads")
            return orjson.loads(text)

        @staticmethod
        def dumps(obj, option=0):
            calls.append("dumps")
            return orjson.dumps(obj, option=option)

    monkeypatch.setattr(codec, "orjson", Spy)
    assert codec.name() == "orjson"
    words = json.dumps({"type": "words", "words": [{"w": f"w{i}", "start": i * 0.25} for i in range(100)]})
    assert len(decode(words).words) == 100 and calls == ["loads"]
    assert isinstance(encode_frame(PLAIN_MESSAGES[4]), bytes) and calls == ["loads", "dumps"]


def outcome(frame):
    try:
        return "ok", repr(decode(frame))
    except ProtocolError as e:
        return str(e.code), e.message


def nested(depth: int) -> str:
    """A flush frame with an ignored field of ``depth`` nested arrays."""
    return '{"type": "flush", "x": ' + "[" * depth + "]" * depth + "}"

#: Client frames json and orjson disagree on, or that test the edges of the fast path.
ODD_FRAMES = [
    '{"type": "words", "words": ["a"], "junk": NaN}',
    '{"type": "flush", "junk": -Infinity}',
    '{"type": "words", "words": [{"w": "x", "start": Infinity}]}',
    '{"type": "words", "words": [{"w": "x", "start": 1e400}]}',
    '{"type": "words", "words": [{"w": "x", "start": 1' + "0" * 309 + "}]}",
    '{"type": "words", "words": [{"w": "x", "start": 100000000000000000000, "end": -9223372036854775809}]}',
    '{"type": "words", "words": [{"w": "x", "start": 18446744073709551615, "end": 9223372036854775807}]}',
    '{"type": "words", "words": [{"w": "x", "start": 123456789012345678, "end": 1.5}]}',
    '{"type": "resume", "start": 18446744073709551616, "context": []}',
    '{"type": "resume", "start": 9007199254740992, "context": []}',
    '{"type": "config", "right_context": 100000000000000000000}',
    '{"type": "config", "max_delay_ms": -9223372036854775809}',
    '{"type": "flush", "n": ' + "9" * 5000 + "}",
    '{"type": "words", "words": ["so", "th\\udc00is", "\\ud800", "\\ud83d\\ude00"]}',
    '{"type": "words", "words": ["a\u00e9\U0001f600"]}',
    '{"type": "words", "words": ["\\u0000"]}',
    '{"type": "words", "words": ["\x01"]}',
    '\ufeff{"type": "flush"}',
    ' \n{"type": "flush"}\t ',
    '{"type": "flush"} x',
    '{"type": "flush", "type": "end"}',
    '{"type": "words", "words": [01]}',
    '{"type": "words", "words": [.5]}',
    "[1, 2]", '"flush"', "7", "null", "true", "", " ", "{not json",
    '{"type": 7}', '{"words": []}',
    b'{"type": "flush"}',
    *(nested(n) for n in (500, 511, 512, 513, 990, 1000, 1024, 1025, 100_000)),
    json.dumps({"type": "words", "words": [{"w": f"w{i}", "start": i + 0.5} for i in range(600)]}),
]


@pytest.mark.parametrize("frame", ODD_FRAMES, ids=lambda f: repr(f)[:40])
def test_client_frames_decode_alike_with_either_codec(frame):
    assert with_codec(True, outcome, frame) == with_codec(False, outcome, frame)


@pytest.mark.parametrize("frame, expected", [
    ('{"type": "words", "words": ["a"], "junk": NaN}', ("bad_request", "invalid JSON: NaN is not a JSON value")),
    ('{"type": "resume", "start": 18446744073709551616, "context": []}',
     ("bad_request", "resume: 'start' must be between 0 and 9007199254740991, not 18446744073709551616")),
    ('{"type": "words", "words": [{"w": "x", "start": 1e400}]}',
     ("bad_request", "words[0].start must be a finite number (within a double's range)")),
    ("[1, 2]", ("bad_request", "a message must be a JSON object")),
    (nested(1000), ("bad_request", "invalid JSON: the frame nests too deeply")),
    ('\ufeff{"type": "flush"}', ("bad_request", "invalid JSON: Unexpected UTF-8 BOM (decode using utf-8-sig): "
                                                "line 1 column 1 (char 0)")),
])
def test_odd_frames_keep_their_error_with_orjson(frame, expected):
    assert with_codec(True, outcome, frame) == expected


def test_big_integers_keep_their_type_with_orjson():
    frame = '{"type": "words", "words": [{"w": "x", "start": 100000000000000000000, "end": 7}]}'
    (word,) = decode(frame).words
    assert (word.start, type(word.start), word.end, type(word.end)) == (10 ** 20, int, 7, int)


_keys = st.text(max_size=4) | st.sampled_from(["type", "words", "w", "start", "end"])
_scalars = (st.none() | st.booleans() | st.integers(-(2 ** 70), 2 ** 70) | st.floats()
            | st.text(st.characters() | st.characters(categories=["Cs"]), max_size=6))  # lone surrogates too
_values = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=4),
                       max_leaves=16)


def loads_outcome(text: str):
    try:
        return "ok", typed(codec.loads(text, parse_constant=wire._no_constant, parse_int=wire._int))
    except ValueError as e:
        return type(e).__name__, str(e)


@settings(max_examples=300, deadline=None)
@given(_values, st.booleans())
def test_loads_agrees_with_json_on_any_value(value, ascii_only):
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert with_codec(True, loads_outcome, text) == with_codec(False, loads_outcome, text)


@settings(max_examples=300, deadline=None)
@given(_values)
def test_dumps_agrees_with_json_on_any_value(value):
    assert typed(json.loads(with_codec(True, codec.dumps, value))) == typed(json.loads(
        json.dumps(value, ensure_ascii=False, separators=(",", ":"))))


# -- the event loop -------------------------------------------------------------------------------


def test_auto_takes_uvloop_where_it_imports():
    assert resolve("auto") is EventLoop.UVLOOP
    assert loop_factory("auto") is uvloop.new_event_loop and loop_factory("uvloop") is uvloop.new_event_loop
    assert loop_factory("asyncio") is asyncio.new_event_loop
    from streampunct.server.app import ServerConfig

    assert ServerConfig().event_loop is EventLoop.AUTO and ServerConfig(event_loop="uvloop").event_loop is EventLoop.UVLOOP


def test_without_uvloop_auto_falls_back_and_uvloop_is_refused(no_uvloop):
    from streampunct.server.app import ServerConfig

    assert resolve("auto") is EventLoop.ASYNCIO and loop_factory("auto") is asyncio.new_event_loop
    with pytest.raises(ValueError, match="uvloop is not installed"):
        loop_factory("uvloop")
    with pytest.raises(ValueError, match="event_loop uvloop: uvloop is not installed"):
        ServerConfig(event_loop="uvloop")
    with pytest.raises(ValueError, match="event_loop must be one of auto, uvloop, asyncio"):
        ServerConfig(event_loop="trio")


def test_serve_event_loop_uvloop_without_it_is_a_one_line_error(no_uvloop, capsys):
    assert main(["serve", "--engine", "fake", "--event-loop", "uvloop"]) == 2
    err = capsys.readouterr().err
    assert err == ("streampunct serve: error: --event-loop uvloop: uvloop is not installed (pip install uvloop; "
                   "there is none for Windows); use auto or asyncio\n")


def test_loop_names():
    for factory, name in ((uvloop.new_event_loop, "uvloop"), (asyncio.new_event_loop, "asyncio")):
        loop = factory()
        try:
            assert loop_name(loop) == name
        finally:
            loop.close()


# -- a real server on each loop and codec -----------------------------------------------------------

WINDOW = WindowConfig(size=48, left=8, right=6)
WORDS = "so this is the story of how we came to build a streaming punctuation server".split()
#: A session's client frames: words with every kind of time, odd and malformed frames, flush, end.
SESSION_FRAMES = [
    json.dumps({"type": "config", "right_context": 100, "max_delay_ms": 600_000}),
    json.dumps({"type": "words", "words": WORDS[:4]}),
    '{"type": "words", "words": [{"w": "caf\u00e9", "start": 3, "end": 3.25}, {"w": "big", "start": 100000000000000000000},'
    ' {"w": "tiny", "start": 5e-324, "end": 1e16}, {"w": "null", "end": 18446744073709551615}]}',
    '{"type": "words", "words": ["a"], "junk": NaN}',
    '{"type": "flush", "n": ' + "9" * 5000 + "}",
    '{"type": "words", "words": ["th\\udc00is", "\\ud800"], "x": 123456789012345678901234}',
    nested(1000),
    "[1, 2]",
    '{"type": "resume", "start": 18446744073709551616, "context": []}',
    '{"type": "flush"}',
    json.dumps({"type": "words", "words": WORDS[4:]}),
    '{"type": "end"}',
]


async def run_session(aligner) -> tuple[str, list, int | None, int | None]:
    """(the loop's kind, the frames of a session, its close code, the close code of a frame that is
    not UTF-8) on a server of the running loop."""
    from streampunct.server.app import ServerConfig, ServerRuntime, serve

    config = ServerConfig(host="127.0.0.1", port=0)
    async with await serve(config, ServerRuntime(lambda: FakeEngine(sleep=True), aligner, WINDOW, "fake-model")) as server:
        await server.wait_ready()
        async with asyncio.timeout(30):
            async with connect(server.url) as ws:
                frames = [await ws.recv()]
                for frame in SESSION_FRAMES:
                    await ws.send(frame)
                frames += [frame async for frame in ws]
                code = ws.close_code
            async with connect(server.url) as ws:  # a text frame that is not UTF-8: 1007, as websockets does
                await ws.recv()
                await ws.send(b'{"type": "words", "words": ["\xff"]}', text=True)
                with pytest.raises(Exception, match="1007"):
                    await ws.recv()
                bad_utf8 = ws.close_code
    return loop_name(asyncio.get_running_loop()), frames, code, bad_utf8


def session_on(kind: str, use_orjson: bool, aligner):
    def run():
        with asyncio.Runner(loop_factory=loop_factory(kind)) as runner:
            return runner.run(run_session(aligner))

    return with_codec(use_orjson, run)


def parsed(frames: list) -> list:
    out = []
    for frame in frames:
        assert isinstance(frame, str), frame  # text frames, whichever codec wrote them
        value = json.loads(frame)
        if value["type"] == "ready":
            value["session"] = "-"
        out.append(typed(value))
    return out


@pytest.mark.slow
def test_a_session_sends_the_same_frames_on_either_loop_and_codec(aligner):
    runs = {(kind, use): session_on(kind, use, aligner) for kind in ("uvloop", "asyncio") for use in (True, False)}
    assert {key: run[0] for key, run in runs.items()} == {key: key[0] for key in runs}
    reference = runs[("asyncio", False)]  # the standard library on the standard loop: as before
    messages = [json.loads(f) for f in reference[1]]
    assert [m["type"] for m in messages].count("error") == 5 and messages[-1] == {"type": "end", "words": 20}
    assert [w["w"] for m in messages if m["type"] == "final" for w in m["words"]] == [
        *WORDS[:4], "café", "big", "tiny", "null", "this", *WORDS[4:]]
    big = next(w for m in messages if m["type"] == "final" for w in m["words"] if w["w"] == "big")
    assert big == {"w": "big", "p": big["p"], "start": 10 ** 20}
    assert (reference[2], reference[3]) == (1000, 1007)
    for key, run in runs.items():
        assert parsed(run[1]) == parsed(reference[1]), key
        assert run[2:] == reference[2:], key


def test_run_server_makes_the_loop_it_is_told_and_logs_it(aligner, caplog):
    from streampunct.server.app import ServerConfig, ServerRuntime, run_server

    seen = []

    def on_ready(server) -> None:
        seen.append(loop_name(asyncio.get_running_loop()))
        signal.raise_signal(signal.SIGTERM)  # run_until_signalled's handler: a graceful stop

    runtime = ServerRuntime(lambda: FakeEngine(sleep=True), aligner, WINDOW, "fake-model")
    caplog.set_level(logging.INFO, logger="streampunct.server.app")
    for kind in ("auto", "uvloop", "asyncio"):
        run_server(ServerConfig(host="127.0.0.1", port=0, event_loop=kind), runtime, on_ready=on_ready)
    assert seen == ["uvloop", "uvloop", "asyncio"]
    assert caplog.text.count("event loop: uvloop; frames' JSON: orjson") == 2
    assert "event loop: asyncio; frames' JSON: orjson" in caplog.text
