"""One rule per session option (``streampunct.core.options``), the same message wherever it is
checked: the wire decoder, ``serve``'s flags, the Python API, ``SessionOptions`` and
``ServerConfig``; and the modes as enums whose values are the flags' strings."""

from __future__ import annotations

import argparse
import json

import pytest

from engines.registry import StreamCacheMode
from streampunct.api import Punctuator
from streampunct.commands import serve
from streampunct.core import codec
from streampunct.core.options import (
    OptionError,
    SessionOptions,
    check_option,
    check_options,
    decimal_digits,
    shown,
)
from streampunct.core.wire import DEFAULT_LIMITS, ErrorCode, Limits, ProtocolError, decode
from streampunct.errors import InputError
from streampunct.server.app import DrainMode, ItnGrammars, ServerConfig
from streampunct.server.batcher import BatcherConfig, BatchRows
from tests.streampunct.conftest import TEST_WINDOW, FakeEngine


def _serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="streampunct serve")
    serve.add_arguments(parser)
    return parser.parse_args(list(argv))


def _wire_message(options: dict) -> str:
    with pytest.raises(ProtocolError) as caught:
        decode(json.dumps({"type": "config", **options}))
    assert caught.value.code is ErrorCode.BAD_REQUEST
    return caught.value.message


def _api_message(aligner, options: dict) -> str:
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    with pytest.raises(InputError) as caught:
        p.stream(**options)
    return str(caught.value)


@pytest.mark.parametrize(("name", "value", "message"), [
    ("right_context", 1001, "'right_context' must be between 0 and 1000, not 1001"),
    ("right_context", -1, "'right_context' must be between 0 and 1000, not -1"),
    ("max_delay_ms", 600_001, "'max_delay_ms' must be between 0 and 600000, not 600001"),
    ("max_delay_ms", -5, "'max_delay_ms' must be between 0 and 600000, not -5"),
])
def test_an_integer_option_out_of_range_reads_the_same_everywhere(aligner, name, value, message):
    with pytest.raises(OptionError) as caught:
        check_option(name, value, DEFAULT_LIMITS)
    assert (caught.value.name, caught.value.message) == (name, message)
    assert _wire_message({name: value}) == message
    assert _api_message(aligner, {name: value}) == message
    with pytest.raises(InputError) as cli:
        serve.build_config(_serve_args("--" + name.replace("_", "-"), str(value)))
    assert str(cli.value) == message.replace(f"'{name}'", "--" + name.replace("_", "-"))
    if value > 0:  # (a negative one is refused by SessionOptions itself, without the server's limits)
        with pytest.raises(ValueError) as config:
            ServerConfig(session_defaults=SessionOptions(**{name: value}))
        assert str(config.value) == message


@pytest.mark.parametrize(("options", "message"), [
    ({"right_context": True}, "'right_context' must be an integer between 0 and 1000"),
    ({"max_delay_ms": 2.5}, "'max_delay_ms' must be an integer between 0 and 600000"),
    ({"partials": 1}, "'partials' must be true or false"),
    ({"capitalize": "yes"}, "'capitalize' must be true or false"),
    ({"itn": 0}, "'itn' must be true or false"),
    ({"lexicon": [["nasa"]]}, "'lexicon' must be a list of [spoken, written] string pairs"),
    ({"lexicon": [["!!", "x"]]}, "lexicon[0]: the spoken phrase '!!' has no words"),
])
def test_a_mistyped_option_reads_the_same_on_the_wire_and_in_the_api(aligner, options, message):
    assert _wire_message(options) == message
    assert _api_message(aligner, options) == message


def test_options_without_limits_have_no_upper_bound():
    assert SessionOptions(right_context=5000, max_delay_ms=10**9).max_delay_ms == 10**9
    with pytest.raises(OptionError, match=r"^'right_context' must be >= 0, not -1$"):
        SessionOptions(right_context=-1)
    with pytest.raises(OptionError, match=r"^'max_delay_ms' must be an integer >= 0$"):
        SessionOptions(max_delay_ms=1.5)
    with pytest.raises(OptionError, match=r"^'partials' must be true or false$"):
        SessionOptions(partials=1)


def test_a_servers_own_limits_bound_its_clients_and_its_defaults():
    limits = Limits(max_right_context=5)
    assert check_options({"right_context": 5, "type": "config", "other": 1}, limits) == {"right_context": 5}
    with pytest.raises(ProtocolError, match="'right_context' must be between 0 and 5, not 6"):
        decode('{"type": "config", "right_context": 6}', limits)
    with pytest.raises(ValueError, match="'right_context' must be between 0 and 5, not 6"):
        ServerConfig(limits=limits, session_defaults=SessionOptions(right_context=6))


def test_the_api_checks_the_lexicon_against_the_servers_limits(aligner):
    pairs = [(f"w{i}", "W") for i in range(DEFAULT_LIMITS.max_lexicon_pairs + 1)]
    assert _api_message(aligner, {"lexicon": pairs}) == (
        f"'lexicon' has {len(pairs)} pairs; the limit is {DEFAULT_LIMITS.max_lexicon_pairs}")
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    assert p.stream(lexicon=(("new  york", "New York"),)).options.lexicon == (("new york", "New York"),)


@pytest.mark.parametrize(("flag", "mode", "field"), [
    ("--stream-cache", StreamCacheMode, "stream_cache"),
    ("--drain", DrainMode, "drain"),
    ("--itn-grammars", ItnGrammars, "itn_grammars"),
])
def test_serve_flags_take_the_modes_values_and_the_config_holds_members(flag, mode, field):
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    (action,) = [a for a in parser._actions if flag in a.option_strings]
    assert action.choices == [m.value for m in mode]
    for member in mode:
        if member == ItnGrammars.ON:
            continue  # needs the itn extra
        value = getattr(serve.build_config(_serve_args(flag, member.value)), field)
        assert value is member and json.dumps(value) == json.dumps(member.value)
    with pytest.raises(ValueError, match=f"{field} must be one of {', '.join(mode)}, not 'x'"):
        ServerConfig(**{field: "x"})


def test_batch_rows_is_an_enum_too():
    assert BatcherConfig(batch_rows="alone").batch_rows is BatchRows.ALONE
    args = _serve_args("--batch-rows", "padded")
    assert serve.build_config(args).batching.batch_rows is BatchRows.PADDED
    with pytest.raises(ValueError, match="batch_rows must be one of padded, exact, alone, got 'x'"):
        BatcherConfig(batch_rows="x")


# -- values shown in messages: bounded, however long the value ----------------------


@pytest.mark.parametrize(("value", "shown_as"), [
    (10**400, "an integer of 401 digits"),
    (-(10**400), "a negative integer of 401 digits"),
    (10**5000, "an integer of 5001 digits"),  # past str's 4300 digits: it has no repr
    (-(10**5000) + 1, "a negative integer of 5000 digits"),
    (10**24, "an integer of 25 digits"),  # 25 characters: one past what is shown
    (-(10**23), "a negative integer of 24 digits"),  # 24 digits and the sign
    (10**23, "100000000000000000000000"),  # 24 characters: shown whole
    (-(10**22), "-10000000000000000000000"),
], ids=["401", "-401", "5001", "-5000", "25", "-24", "24-shown", "-23-shown"])  # (no str of 10**5000)
def test_a_huge_integer_option_is_shown_by_its_digit_count(aligner, value, shown_as):
    bounded = f"'right_context' must be between 0 and 1000, not {shown_as}"
    with pytest.raises(OptionError) as caught:
        check_option("right_context", value, DEFAULT_LIMITS)
    assert caught.value.message == bounded
    assert _api_message(aligner, {"right_context": value}) == bounded
    if value < 0:  # SessionOptions has no upper bound
        with pytest.raises(OptionError, match=f"^'max_delay_ms' must be >= 0, not {shown_as}$"):
            SessionOptions(max_delay_ms=value)
    else:
        with pytest.raises(ValueError, match=f"^'right_context' must be between 0 and 1000, not {shown_as}$"):
            ServerConfig(session_defaults=SessionOptions(right_context=value))


@pytest.mark.parametrize("json_lib", ["orjson", "json"])
@pytest.mark.parametrize(("digits", "name", "message"), [
    ("1" * 400, "right_context", "'right_context' must be between 0 and 1000, not an integer of 400 digits"),
    ("-" + "9" * 400, "max_delay_ms", "'max_delay_ms' must be between 0 and 600000, not a negative integer of 400 digits"),
    ("1" * 5000, "max_delay_ms", "invalid JSON: a number in the frame is too long"),  # already so: kept
], ids=["400", "-400", "5000"])
def test_a_huge_json_integer_option_gets_a_short_bad_request(monkeypatch, json_lib, digits, name, message):
    if json_lib == "json":
        monkeypatch.setattr(codec, "orjson", None)
    for frame, expected in [
        (f'{{"type": "config", "{name}": {digits}}}', message),
        (f'{{"type": "resume", "start": 0, "context": [], "config": {{"{name}": {digits}}}}}',
         message if message.startswith("invalid JSON") else f"resume: config: {message}"),
    ]:
        with pytest.raises(ProtocolError) as caught:
            decode(frame)
        assert (caught.value.code, caught.value.message) == (ErrorCode.BAD_REQUEST, expected)


def test_a_servers_limit_past_strs_digits_is_shown_by_its_digit_count():
    limits = Limits(max_right_context=10**5000)
    assert check_option("right_context", 10**4999, limits) == 10**4999
    with pytest.raises(OptionError) as caught:
        check_option("right_context", -1, limits)
    assert caught.value.message == "'right_context' must be between 0 and an integer of 5001 digits, not -1"
    with pytest.raises(OptionError) as caught:
        check_option("right_context", 1.5, limits)
    assert caught.value.message == "'right_context' must be an integer between 0 and an integer of 5001 digits"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"max_word_chars": -(10**5000)}, "max_word_chars must be an integer >= 1, not a negative integer of 5001 digits"),
    ({"max_right_context": -(10**400)}, "max_right_context must be an integer >= 0, not a negative integer of 401 digits"),
    ({"max_word_chars": "x" * 100}, "max_word_chars must be an integer >= 1, not 'xxxxxxxxxxxxxxxxxxxxxxx... (102 characters)"),
    ({"max_word_chars": 0}, "max_word_chars must be an integer >= 1, not 0"),
    ({"max_context_words": "5"}, "max_context_words must be an integer >= 0 or None, not '5'"),
])
def test_a_configurations_own_counts_show_their_values_bounded(kwargs, message):
    with pytest.raises(ValueError) as caught:
        Limits(**kwargs)
    assert str(caught.value) == message


def test_shown_cuts_reprs_and_counts_digits_exactly():
    class NoRepr:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert [shown(v) for v in (True, 7, -7, "abc", None)] == ["True", "7", "-7", "'abc'", "None"]
    assert shown([1] * 20) == "[1, 1, 1, 1, 1, 1, 1, 1,... (60 characters)"
    assert shown(NoRepr()) == "a NoRepr"
    for k in (1, 2, 15, 16, 17, 100, 4300, 4301, 10_000):
        assert (decimal_digits(10**k - 1), decimal_digits(10**k), decimal_digits(-(10**k))) == (k, k + 1, k + 1)
    assert decimal_digits(0) == 1
