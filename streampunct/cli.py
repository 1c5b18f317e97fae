"""The ``streampunct`` command line: one entry point, one module per subcommand.

A subcommand module exposes ``NAME``, ``HELP``, ``add_arguments(parser)`` and
``run(args) -> int``. The runtime's own subcommands (``serve``,
``punctuate``, ``caption``, ``evaluate``) live in ``streampunct/commands/``.
Every other subcommand registers itself under the entry-point group
:data:`ENTRY_POINT_GROUP` (``train`` and ``build-engine`` from ``training``,
``bench`` from ``benchmarks``; see pyproject.toml), so the runtime never
imports the packages it does not need to serve. A plugin that fails to
import is left out of ``--help`` with a warning instead of breaking the CLI;
one whose package is not installed at all (an image with the runtime alone)
is listed as such, and running it is a one-line error.
Heavy imports (torch, onnx) happen inside ``run`` so that ``streampunct
--help`` stays fast and works on the base install.

Errors: a malformed argument is a usage error (argparse, status 2; a subcommand's
parser reports its own unknown arguments, with its usage); an error
raised on purpose while running (:class:`~streampunct.errors.StreampunctError`,
the engines' own :class:`~engines.base.EngineError`, which is not one since
``engines`` does not import ``streampunct``, or an ``OSError`` about a path
the user gave: not found, permission denied, a directory, already there, a name
too long, a loop of links, no such device) is
one line ``streampunct COMMAND: error: ...`` and status 2 too. An output the
machine cannot take (a full disk, a file-size limit, a quota, a read-only file
system: :data:`~streampunct.text.textfile.WRITE_ERRNOS`) is one line ``... error: cannot write FILE: why``
and status 1, an ``--out`` file left as it was. Any other exception is a fault
of the program or the machine (a bug) and keeps its traceback; a closed pipe on
the output (``| head``) ends the command quietly with status 141. Ctrl-C, SIGTERM and SIGHUP (unless
ignored, as under nohup) stop a command the same way, cleaning up as it does
(an ``--out`` file stays as it was), with status 130, 143 and 129: from the first thing
:func:`main` does, before the subcommands' modules load (the first half second), quietly.
Before :func:`main`, while Python starts and this module loads (a few hundredths of a second,
kept short: its heavier imports wait until used), Python's defaults hold: SIGTERM and SIGHUP
end the process by the signal (a shell's status is 143 or 129 all the same), and a Ctrl-C stops
the import with a traceback, unless the command came in through
:func:`streampunct.__main__.console`, which loads this module with both taken care of.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import signal as _signal
import sys
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType

from streampunct import __version__
from streampunct.errors import StreampunctError

# logging and importlib.metadata load when used (main() has its signal handlers by then): they
# take most of this module's import time, before main() runs and while no handler is set

#: The runtime's own subcommands, in the order ``--help`` lists them.
COMMANDS = ("serve", "punctuate", "caption", "evaluate")

#: Subcommands that need the ``train`` extra (torch and the export tools), not the runtime alone.
TRAIN_EXTRA_COMMANDS = ("train", "build-engine")

#: Entry-point group through which other packages add subcommands.
ENTRY_POINT_GROUP = "streampunct.commands"


def entry_points(group: str):
    """:func:`importlib.metadata.entry_points` of ``group``, imported on first use."""
    from importlib.metadata import entry_points as installed

    return installed(group=group)


def plugin_commands() -> Iterator[ModuleType]:
    """Subcommand modules registered under :data:`ENTRY_POINT_GROUP`, sorted by name."""
    import logging

    log = logging.getLogger(__name__)
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name):
        if ep.name in COMMANDS:
            log.warning("entry point %s=%s shadows a runtime subcommand; ignored", ep.name, ep.value)
            continue
        parts = ep.module.split(".")
        try:
            yield ep.load()
        except Exception as e:  # a broken plugin must not take the runtime's commands down
            if isinstance(e, ModuleNotFoundError) and e.name in {".".join(parts[:k + 1]) for k in range(len(parts))}:
                # its package is not installed here (a runtime-only image): listed, and says so if run
                log.debug("subcommand %s: package %s not installed", ep.name, e.name)
                yield _absent_command(ep.name, parts[0])
            else:
                log.warning("subcommand %s (%s) is unavailable: %s: %s", ep.name, ep.value,
                            type(e).__name__, e)


def _absent_command(name: str, package: str) -> ModuleType:
    """A subcommand whose package this install does not have: ``--help`` lists it as such, and
    running it is a one-line error that says what to install."""
    module = ModuleType(f"streampunct.cli.absent_{name}")
    why = f"not in this install (the {package!r} package is missing)"
    install = "pip install '.[train]'" if name in TRAIN_EXTRA_COMMANDS else "pip install ."

    def run(_args: argparse.Namespace) -> int:
        raise StreampunctError(f"{why}: install streampunct from a source checkout with {install}")

    module.NAME, module.HELP = name, why  # type: ignore[attr-defined]

    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.takes_any_arguments = True  # type: ignore[attr-defined]  # run says why instead

    module.add_arguments = add_arguments  # type: ignore[attr-defined]
    module.run = run  # type: ignore[attr-defined]
    return module


def available_commands() -> Iterator[ModuleType]:
    for name in COMMANDS:
        yield importlib.import_module(f"streampunct.commands.{name}")
    yield from plugin_commands()


class SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: it reports the arguments it does not know itself, with its own
    usage (``streampunct punctuate: error: unrecognized arguments: ...``), instead of leaving
    them to the top-level parser, whose usage does not show the subcommand's options."""

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        namespace, extras = super().parse_known_args(args, namespace)
        if getattr(self, "takes_any_arguments", False):  # a subcommand not installed here
            return namespace, []
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streampunct",
        description="Real-time punctuation for speech recognition output.",
    )
    parser.add_argument("--version", action="version", version=f"streampunct {__version__}")
    parser.add_argument(
        "--log-level", default=None, choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default: INFO; WARNING for the filters punctuate and caption, whose "
             "output is the product)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                parser_class=SubcommandParser)
    for module in available_commands():
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run, _log_level=getattr(module, "LOG_LEVEL", "INFO"))
    return parser


#: OSErrors that name a path the user gave wrong (a usage error, not a fault).
PATH_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError, FileExistsError)
#: Their errnos with no class of their own: a name too long, a loop of links, a device that
#: is not there (``/dev/tty`` with no terminal). A usage error too when the error names a path.
PATH_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.ELOOP, errno.ENXIO, errno.ENODEV})


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised as Ctrl-C's KeyboardInterrupt is, so that a command cleans up
    the same way (an ``--out`` file's temporary copy removed, servers and workers stopped) and
    exits with 128 + the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminated(signum: int, _frame: object) -> None:
    raise Terminated(signum)


#: The signals that stop a command (Ctrl-C, SIGTERM, SIGHUP where the platform has it).
_ALL_STOP_SIGNALS = tuple(getattr(_signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(_signal, name))


def _stop_signals(previous: dict[int, object]) -> None:
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread while a command runs,
    where they would kill the process at once (their default; an ignored one, as under nohup,
    stays ignored; a command with an event loop sets its own). The handlers they had go into
    ``previous``, to restore."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is signal.SIG_DFL:
            previous[sig] = signal.signal(sig, _terminated)


def _stopped(e: KeyboardInterrupt) -> int:
    """The status of a command that a stop signal ended: 128 + its number."""
    return 128 + (e.signum if isinstance(e, Terminated) else _signal.SIGINT)


def _with_stop_signals(body: Callable[[], int], own_process: bool) -> int:
    """``body()``, which Ctrl-C, SIGTERM and SIGHUP end with 128 + the signal's number (130,
    143, 129) at any point, its imports included (:func:`_stop_signals`); then the handlers as
    :func:`run_command` says (``own_process``)."""
    import signal
    import threading

    before: dict[int, object] = {}  # every stop signal's handler, for a caller that goes on
    previous: dict[int, object] = {}  # those that _stop_signals replaced
    try:
        # (off the main thread no command sets a handler, and none can be set back)
        if threading.current_thread() is threading.main_thread():
            before.update((sig, signal.getsignal(sig)) for sig in _ALL_STOP_SIGNALS)
        _stop_signals(previous)
        return body()
    except KeyboardInterrupt as e:
        return _stopped(e)
    finally:
        for sig, handler in previous.items():
            if signal.getsignal(sig) is not signal.SIG_IGN:  # ignored by the command (a server exiting): kept
                signal.signal(sig, handler)
        if not own_process:  # the caller goes on: as it had them, ignored by the command or not
            for sig, handler in before.items():
                if handler is not None:  # (None: set outside Python; left as the command left it)
                    signal.signal(sig, handler)


def run_command(run, args: argparse.Namespace, prog: str, *, own_process: bool = True) -> int:
    """Run one subcommand; the project's and the engines' own errors, and wrong paths, become a
    one-line message and status 2; anything else keeps its traceback. Ctrl-C, SIGTERM and
    SIGHUP end it with 128 + the signal's number (130, 143, 129).

    ``own_process``: the command is the process's (``streampunct ...``), which exits next, so a
    stop signal that the command ignores for its exit (``serve``, ``caption``) stays ignored.
    Called in-process (``main(argv)``), every stop signal's handler is put back as it was."""
    return _with_stop_signals(lambda: _run_command(run, args, prog), own_process)


def _run_command(run, args: argparse.Namespace, prog: str) -> int:
    # here, not at import: numpy loads with it (the stop signals are taken care of by now)
    from engines.base import EngineError

    try:
        return int(run(args) or 0)
    except (StreampunctError, EngineError, *PATH_ERRORS) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # the reader went away (`... | head`): stop quietly, as a shell tool does
        _stdout_to_devnull()
        return 128 + 13  # killed by SIGPIPE
    except OSError as e:
        from streampunct.text.textfile import WRITE_ERRNOS, write_error_message

        if e.errno in PATH_ERRNOS and e.filename:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return 2
        if e.errno not in WRITE_ERRNOS:
            raise
        if e.filename == "stdout" or (not e.filename and _stdout_fails()):
            _stdout_to_devnull()  # a full disk under `> file`: nothing more goes there
            e.filename = "stdout"
        print(f"{prog}: error: {write_error_message(e)}", file=sys.stderr)
        return 1


def _stdout_fails() -> bool:
    """Whether stdout cannot take what it holds for a reason of :data:`WRITE_ERRNOS` (the
    write that failed was stdout's; a reader gone away is no full disk)."""
    from streampunct.text.textfile import WRITE_ERRNOS

    try:
        sys.stdout.flush()
    except OSError as e:
        return e.errno in WRITE_ERRNOS
    except (ValueError, AttributeError):
        return False
    return False


def _stdout_to_devnull() -> None:
    """Point stdout's descriptor at /dev/null, so that the flush at exit does not fail again."""
    from streampunct.text.textfile import to_devnull

    to_devnull(sys.stdout)


def configure_logging(level: str) -> None:
    import logging

    logging.basicConfig(
        level=getattr(logging, level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _stderr_or_devnull() -> None:
    """Started with stderr closed (``2>&-``), Python's ``sys.stderr`` is None, and ``print(...,
    file=sys.stderr)`` would write to stdout, into the command's output: messages go nowhere
    instead."""
    if sys.stderr is None:
        import os

        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (for the process's life)


def main(argv: Sequence[str] | None = None) -> int:
    """The ``streampunct`` command (``argv``: its arguments, in-process; None: the process's).
    Its first step takes the stop signals (:func:`_with_stop_signals`), so that one that comes
    while the subcommands' modules load (the first half second) ends it as one during its run
    does: quietly, with 130, 143 or 129."""

    def command() -> int:
        _stderr_or_devnull()
        args = build_parser().parse_args(argv)
        configure_logging(args.log_level or args._log_level)
        return run_command(args._run, args, f"streampunct {args.command}", own_process=argv is None)

    return _with_stop_signals(command, own_process=argv is None)


def command_main(module: ModuleType, argv: Sequence[str] | None = None) -> int:
    """``python -m <subcommand module>``: one subcommand without the CLI frame (stop signals as
    :func:`main` takes them)."""

    def command() -> int:
        _stderr_or_devnull()
        parser = argparse.ArgumentParser(prog=f"streampunct {module.NAME}", description=module.HELP)
        module.add_arguments(parser)
        args = parser.parse_args(argv)
        configure_logging("INFO")
        return run_command(module.run, args, parser.prog, own_process=argv is None)

    return _with_stop_signals(command, own_process=argv is None)


if __name__ == "__main__":
    sys.exit(main())
