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
from streampunct.core.options import OptionError, SessionOptions, check_option, check_options
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
