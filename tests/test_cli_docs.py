"""The docs name every option of the command line, so that they cannot drift from it.

The parsers are walked as ``streampunct`` builds them (``streampunct.cli.build_parser``: the
runtime's subcommands, then those registered under the entry-point group, ``bench`` with its own
subcommands among them), and every option string of every parser must appear in README.md or
docs/*.md as a whole word (``--token`` is not named by ``--token-file``). argparse's own
``-h/--help`` is left out, and so is the ``--no-X`` that a ``BooleanOptionalAction`` makes of a
documented ``--X`` (``--[no-]X`` names both).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path

from streampunct.cli import COMMANDS, build_parser

REPO = Path(__file__).resolve().parents[1]
DOCS = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))


def docs_text() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in DOCS)


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def options(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[str, str]]:
    """``(command, option string)`` for every option of ``parser`` and of its subcommands, recursively."""
    command = " ".join(("streampunct", *path))
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from options(sub, (*path, name))
        elif not isinstance(action, argparse._HelpAction):
            for option in action.option_strings:
                yield command, option


def mentioned(option: str, text: str) -> bool:
    if re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text):
        return True
    if option.startswith("--no-"):  # BooleanOptionalAction's negation: --[no-]X, or a documented --X
        positive = "--" + option.removeprefix("--no-")
        return mentioned(positive, text) or f"--[no-]{positive[2:]}" in text
    return False


def undocumented(parser: argparse.ArgumentParser, text: str) -> list[str]:
    """``"streampunct COMMAND --option"`` for every option that ``text`` does not name."""
    return [f"{command} {option}" for command, option in options(parser) if not mentioned(option, text)]


def test_the_walk_reaches_every_subcommand():
    parser = build_parser()
    commands = subparsers(parser)
    assert set(COMMANDS) | {"bench", "train", "build-engine"} <= set(commands)
    assert {"load", "live", "failover", "flood", "triton"} <= set(subparsers(commands["bench"]))
    walked = set(options(parser))
    for command, option in [("streampunct caption", "--token"), ("streampunct evaluate", "--window"),
                            ("streampunct bench failover", "--haproxy"),
                            ("streampunct bench failover", "--duration-s"), ("streampunct", "--version")]:
        assert (command, option) in walked


def test_every_option_is_in_the_docs():
    missing = undocumented(build_parser(), docs_text())
    assert missing == [], "options missing from README.md and docs/*.md: " + ", ".join(missing)


def test_the_check_fails_when_an_option_is_missing():
    """A self-check: an option no doc names, one whose mention is removed, and a near miss are reported."""
    text = docs_text()
    before = set(undocumented(build_parser(), text))  # empty when the test above passes
    parser = build_parser()
    caption = subparsers(parser)["caption"]
    caption.add_argument("--not-in-any-doc", action="store_true")
    caption.add_argument("--frobnicate-this", action=argparse.BooleanOptionalAction)
    failover = subparsers(subparsers(parser)["bench"])["failover"]
    failover.add_argument("--haproxy-config")  # only a prefix of it ("--haproxy") is in the docs
    assert [m for m in undocumented(parser, text) if m not in before] == [
        "streampunct caption --not-in-any-doc", "streampunct caption --frobnicate-this",
        "streampunct caption --no-frobnicate-this", "streampunct bench failover --haproxy-config",
    ]
    without = re.sub(r"--end-timeout-s(?![\w-])", "", text)
    assert [m for m in undocumented(build_parser(), without) if m not in before] == [
        "streampunct caption --end-timeout-s"]
    assert mentioned("--token", "`--token TOKEN`") and not mentioned("--token", "--token-file")
    assert mentioned("--no-partials", "`--partials`") and mentioned("--no-x", "--[no-]x")


def test_server_docs_name_every_engine_backend():
    from engines.registry import BACKENDS

    server = (REPO / "docs" / "server.md").read_text(encoding="utf-8")
    [row] = [line for line in server.splitlines() if line.startswith("| `--engine` |")]
    assert [name for name in BACKENDS if f"`{name}`" not in row] == []
