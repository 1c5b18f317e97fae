"""A stop signal while ``streampunct`` starts (its modules loading, its parser being built) ends
it as one during the command does: quietly, with 128 + the signal's number. It used to meet
Python's defaults: SIGTERM and SIGHUP killed the process (status -15, -1), and a Ctrl-C while
``streampunct.cli`` imported printed a ``KeyboardInterrupt`` traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

STOPS = ["SIGTERM", "SIGHUP", "SIGINT"]


def _default_stop_signals() -> None:
    """In a child: the stop signals at their defaults, whatever the test runner's are (a job run
    in the background of a script ignores SIGINT, one under nohup SIGHUP, and children inherit it)."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_default_stop_signals,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


@pytest.mark.parametrize("module", ["streampunct", "streampunct.cli"])
@pytest.mark.parametrize("sig", STOPS)
def test_a_stop_signal_while_the_commands_load_ends_quietly_with_its_status(sig, module):
    """Signalled once the parser's building has begun (``-X importtime`` says when the serve
    command's server modules are loaded; the other commands' modules are still to come), through
    ``python -m streampunct`` (:func:`streampunct.__main__.console`) and the CLI module itself
    (what the console script calls). The command reads stdin, left open, so that a signal that
    comes late still finds it running."""
    proc = subprocess.Popen(
        [sys.executable, "-X", "importtime", "-m", module, "punctuate", "-", "--engine", "fake"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=_default_stop_signals,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    watchdog = threading.Timer(60, proc.kill)  # a marker that never comes fails, not hangs
    watchdog.start()
    try:
        err = b""
        while not err.rstrip().endswith(b"| streampunct.server.app"):  # (serve's add_arguments)
            line = proc.stderr.readline()
            assert line, (proc.wait(), err.decode())
            err += line
        proc.send_signal(getattr(signal, sig))
        _, rest = proc.communicate(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = "".join(
        line
        for line in (err + rest).decode().splitlines(True)
        if not line.startswith("import time:")
    )
    assert (proc.returncode, "Traceback" in said) == (128 + getattr(signal, sig), False), said


@pytest.mark.parametrize("sig", STOPS)
def test_a_stop_signal_while_the_cli_module_imports_ends_quietly_with_its_status(sig):
    """``python -m streampunct``: the signal comes at a set point, as ``streampunct.cli`` starts to
    import (a finder the test puts first sends it); Ctrl-C there printed a traceback."""
    proc = _run(f"""
        import os, runpy, signal, sys

        class Stop:
            def find_spec(self, name, path=None, target=None):
                if name == "streampunct.cli":
                    sys.meta_path.remove(self)
                    os.kill(os.getpid(), signal.{sig})
                return None

        sys.meta_path.insert(0, Stop())
        sys.argv = ["streampunct", "--version"]
        runpy.run_module("streampunct", run_name="__main__", alter_sys=True)
        """)
    assert (proc.returncode, proc.stdout, proc.stderr) == (128 + getattr(signal, sig), "", "")


@pytest.mark.parametrize("sig", STOPS)
@pytest.mark.parametrize("argv", [None, ["--version"]])
def test_a_stop_signal_while_the_parser_is_built_ends_quietly_and_gives_the_handlers_back(
    sig, argv
):
    """At a set point of ``main()``'s start (the subcommands' modules asked for), the signal ends
    it with its status, as the process's command (``argv`` None) or called in-process; after it,
    every stop signal's handler is as it was (the caller's own SIGHUP handler, where it had one)."""
    proc = _run(f"""
        import os, signal, sys
        from streampunct import cli

        def caller(signum, frame):
            pass

        if signal.{sig} != signal.SIGHUP:
            signal.signal(signal.SIGHUP, caller)  # a handler of its own: left alone, and kept
        before = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
        real = cli.available_commands

        def commands():
            os.kill(os.getpid(), signal.{sig})
            yield from real()

        cli.available_commands = commands
        sys.argv = ["streampunct", "--version"]
        status = cli.main({argv!r})
        after = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
        print(status, after == before)
        """)
    assert (proc.stdout, proc.stderr) == (f"{128 + getattr(signal, sig)} True\n", "")
