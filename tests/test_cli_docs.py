"""The docs name every option of the command line, so that they cannot drift from it.

The parsers are walked as ``streampunct`` builds them (``streampunct.cli.build_parser``: the
runtime's subcommands, then those registered under the entry-point group, ``bench`` with its own
subcommands among them), and every option string of every parser must appear in README.md or
docs/*.md as a whole word (``--token`` is not named by ``--token-file``). argparse's own
``-h/--help`` is left out, and so is the ``--no-X`` that a ``BooleanOptionalAction`` makes of a
documented ``--X`` (``--[no-]X`` names both).

And every command the docs give (``streampunct ...`` and ``python -m MODULE ...`` of this
project, in code blocks and inline code) is parsed as it is written: its subcommands exist, its
options are the command's own (in full: argparse would take an abbreviation) and their values
parse. A mention that only names a command or an option (``streampunct evaluate --live``,
``train --out``) or shows a placeholder (``--live-right-context RC``) passes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import runpy
import shlex
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

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


# --- every documented command parses -------------------------------------------------------

COMMAND = re.compile(r"(?:streampunct|python3? -m [\w.]+)(?=\s|$)")
PROJECT_PACKAGES = ("streampunct", "benchmarks", "training", "engines")
SHELL_OPERATORS = {"&", "&&", "|", "||", ";", ">", ">>", "2>", "2>&1", "<"}
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")  # DIR, CKPT, M, RC, DEV2010
NUMBER = re.compile(r"-\d")


def documented_commands(text: str) -> list[tuple[int, str]]:
    """``(line, command)`` for every command of ``text``: a code block's lines (joined over
    ``\\`` continuations, less a ``# comment``) and inline code spans that start with one."""
    found: list[tuple[int, str]] = []
    lines = text.splitlines()
    prose = list(lines)
    fence, i = False, 0
    while i < len(lines):
        if lines[i].lstrip().startswith("```"):
            fence = not fence
            prose[i] = ""
        elif fence:
            start, line = i, lines[i].strip()
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1].rstrip() + " " + lines[i].strip()
            prose[start : i + 1] = [""] * (i + 1 - start)
            line = re.sub(r"\s+#.*$", "", line)
            if COMMAND.match(line) and " -> " not in line:  # not a diagram's arrow (design.md)
                found.append((start + 1, line))
        i += 1
    joined = "\n".join(prose)
    for span in re.finditer(r"`([^`]+)`", joined):
        code = " ".join(span.group(1).split())
        if COMMAND.match(code):
            found.append((joined.count("\n", 0, span.start()) + 1, code))
    return sorted(found)


def command_words(command: str) -> list[str]:
    """The command's words as a shell splits them, with ``[optional]`` brackets and ``...``
    dropped, cut at the first shell operator."""
    words = shlex.split(command.replace("[", " ").replace("]", " "))
    cut = next((k for k, w in enumerate(words) if w in SHELL_OPERATORS), len(words))
    return [w for w in words[:cut] if w != "..."]


def parse_error(parse, args: list[str]) -> str | None:
    """What ``parse(args)`` reports (its last line), or None when it parses or is only a mention:
    required arguments left out, an option named at the end without its value, a placeholder
    value."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(out), contextlib.redirect_stdout(out):
            parse(args)
    except SystemExit as e:
        if e.code in (0, None):  # --help, --version
            return None
        message = (out.getvalue().strip().splitlines() or ["(no message)"])[-1]
        if "the following arguments are required" in message:
            return None
        if re.search(r"expected (at least )?one argument", message) and args[-1].startswith("-"):
            return None
        values = re.findall(r"'([^']*)'", message)
        if values and PLACEHOLDER.fullmatch(values[-1]):
            return None
        return message
    return None


def streampunct_problem(args: list[str]) -> str | None:
    """Why ``streampunct ARGS`` is not a command of ``build_parser()``, or None."""
    parser = build_parser()
    current, takes_value = parser, False
    for word in args:
        if takes_value:
            takes_value = False
        elif word.startswith("-") and not NUMBER.match(word):
            name = word.split("=", 1)[0]
            action = current._option_string_actions.get(name)
            if action is None:
                return f"{current.prog}: no option {name}"
            takes_value = action.nargs != 0 and "=" not in word
        elif commands := subparsers(current):
            if word not in commands:
                return f"{current.prog}: no command {word!r}"
            current = commands[word]
    return parse_error(parser.parse_args, args)


class _Parsed(Exception):
    """Raised in place of running a module once its options are parsed."""


@contextlib.contextmanager
def options_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make every argparse parse stop the program once parsed: ``python -m MODULE`` then parses
    its options, with its own errors, and does nothing else."""
    parse_args, parse_known_args = (
        argparse.ArgumentParser.parse_args,
        argparse.ArgumentParser.parse_known_args,
    )
    inside = []

    def parse_args_then_stop(self, args=None, namespace=None):
        inside.append(True)
        try:
            parse_args(self, args, namespace)
        finally:
            inside.pop()
        raise _Parsed

    def parse_known_args_then_stop(self, args=None, namespace=None):
        result = parse_known_args(self, args, namespace)
        if not inside:
            raise _Parsed
        return result

    with monkeypatch.context() as m:
        m.setattr(argparse.ArgumentParser, "parse_args", parse_args_then_stop)
        m.setattr(argparse.ArgumentParser, "parse_known_args", parse_known_args_then_stop)
        yield


def module_problem(module: str, args: list[str], monkeypatch: pytest.MonkeyPatch) -> str | None:
    """Why ``python -m MODULE ARGS`` does not parse, or None (also for a module of another
    project, and one whose optional dependencies are not installed here)."""
    if module == "streampunct":
        return streampunct_problem(args)
    if module.split(".")[0] not in PROJECT_PACKAGES:
        return None
    if importlib.util.find_spec(module) is None:
        return f"no module {module}"

    def run(argv: list[str]) -> None:
        monkeypatch.setattr(sys, "argv", [module, *argv])
        try:
            # runpy warns that the module is "found in sys.modules": it runs again as __main__
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
                runpy.run_module(module, run_name="__main__", alter_sys=True)
        except _Parsed:
            return
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] in PROJECT_PACKAGES:
                raise
            return  # an optional dependency missing here: nothing to check
        raise AssertionError(f"python -m {module} returned without parsing its options")

    with options_only(monkeypatch):
        return parse_error(run, args)


def command_problem(command: str, monkeypatch: pytest.MonkeyPatch) -> str | None:
    words = command_words(command)
    if words[0] == "streampunct":
        if len(words) > 1 and words[1].endswith(":"):  # an error message quoted, not a command
            return None
        return streampunct_problem(words[1:])
    return module_problem(words[2], words[3:], monkeypatch)


def documented_problems(path_text: list[tuple[str, str]], monkeypatch) -> list[str]:
    return [
        f"{name}:{line}: {command}: {problem}"
        for name, text in path_text
        for line, command in documented_commands(text)
        if (problem := command_problem(command, monkeypatch)) is not None
    ]


def test_every_documented_command_parses(monkeypatch):
    docs = [(str(path.relative_to(REPO)), path.read_text(encoding="utf-8")) for path in DOCS]
    commands = [c for _, text in docs for c in documented_commands(text)]
    assert len(commands) > 150  # the walk finds the docs' commands
    assert documented_problems(docs, monkeypatch) == []


def test_the_command_check_reports_what_does_not_parse(monkeypatch):
    """A self-check: wrong options, values, commands and modules are reported; mentions are not."""
    text = "\n".join(
        [
            "```bash",
            "streampunct bench load --sesions 5 --duration 20          # a misspelt option",
            "streampunct bench load --sessions 5 \\",
            "    --duration soon",
            "streampunct bench nosuch",
            "streampunct bench load --dur 20",
            "python -m benchmarks.compare_models A B --vaild dev2010",
            "python -m benchmarks.no_such_module --json x.json",
            "streampunct evaluate --data DEV2010 --live --live-right-context RC   # placeholders",
            "```",
            "Mentions: `streampunct evaluate --live`, `streampunct train --out`, `python -m",
            "training.static_scales`, `streampunct bench itn [--capitalize]`, `streampunct serve --port 8771 &`,",
            "`streampunct caption: error: stdin looks binary`, `python -m benchmarks.compare_models OLD NEW",
            "--valid dev2010`; not a command: `streampunct.json`.",
        ]
    )
    assert documented_problems([("x.md", text)], monkeypatch) == [
        "x.md:2: streampunct bench load --sesions 5 --duration 20: streampunct bench load: no option --sesions",
        "x.md:3: streampunct bench load --sessions 5 --duration soon: streampunct bench load: error: "
        "argument --duration: expected a number > 0, got 'soon'",
        "x.md:5: streampunct bench nosuch: streampunct bench: no command 'nosuch'",
        "x.md:6: streampunct bench load --dur 20: streampunct bench load: no option --dur",
        "x.md:7: python -m benchmarks.compare_models A B --vaild dev2010: python -m benchmarks.compare_models: "
        "error: unrecognized arguments: --vaild dev2010",
        "x.md:8: python -m benchmarks.no_such_module --json x.json: no module benchmarks.no_such_module",
    ]
