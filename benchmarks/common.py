"""Helpers shared by the benchmarks: result files, plotting (the machine description:
:mod:`engines.host`)."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from engines.deps import extra_hint
from engines.host import cpu_features, git_commit, machine  # noqa: F401 (the benchmarks' names)
from streampunct.text.textfile import file_in_the_way

REPO = Path(__file__).resolve().parent.parent


def default_results_dir(repo: Path) -> Path:
    """Where results go by default: the checkout's ``benchmarks/results``; installed from a wheel
    (``repo`` is then site-packages, with no ``pyproject.toml``), ``benchmarks/results`` under the
    current directory, never into the installed packages."""
    return repo / "benchmarks" / "results" if (repo / "pyproject.toml").is_file() else Path("benchmarks", "results")


RESULTS_DIR = default_results_dir(REPO)


def prepare_out_dir(out_dir: Path | str | None, *files: str) -> Path:
    """The folder a run writes its results into (None: :data:`RESULTS_DIR`), created now, before
    the run's work, so that a wrong path fails at once rather than after the run: a path that is
    a file, or lies under one, is a :class:`NotADirectoryError`, and ``files`` (names in it, such
    as ``load.json``) that are folders an :class:`IsADirectoryError`, each naming the path (the
    command line makes them a one-line ``error:``); a folder that cannot be made or written into
    is a :class:`PermissionError`."""
    out_dir = Path(out_dir) if out_dir else RESULTS_DIR
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = file_in_the_way(out_dir) or out_dir
        where = "it is a file" if blocker == out_dir else f"{blocker} is a file"
        raise NotADirectoryError(f"cannot write results into {out_dir}: {where}, not a folder") from None
    except PermissionError:
        raise PermissionError(f"cannot create the results folder {out_dir}: permission denied") from None
    if not os.access(out_dir, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write results into {out_dir}: permission denied")
    for name in files:
        if (out_dir / name).is_dir():
            raise IsADirectoryError(f"cannot write the result {out_dir / name}: it is a folder")
    return out_dir


def prepare_out_file(path: Path | str, parser=None) -> Path:
    """:func:`prepare_out_dir` for one result file (``--json``, ``--out``): its folder made now,
    the file not a folder; with an argparse ``parser``, a wrong path is its usage error (exit 2)."""
    path = Path(path)
    try:
        prepare_out_dir(path.parent, path.name)
    except OSError as e:
        if parser is None:
            raise
        parser.error(str(e))
    return path


def result_stem(value: str) -> str:
    """An argparse type for ``--name``: a result file's stem, written in ``--out-dir`` (no folder
    in it, not empty, not hidden), so that a wrong one is a usage error before any work. A name
    ending in ``.json`` is that file's: ``--name foo.json`` writes ``foo.json`` (and ``foo.png``)."""
    value = value.removesuffix(".json")
    if not value or value in (".", "..") or value.startswith(".") or "/" in value or "\\" in value:
        raise argparse.ArgumentTypeError(
            f"must be a file name stem (the results go in --out-dir), not {value!r}")
    return value


def check_positive(**values: float) -> None:
    """ValueError unless every value is a finite number > 0 (NaN is not)."""
    for name, value in values.items():
        if not 0 < value < math.inf:
            raise ValueError(f"{name} must be a finite number > 0, not {value}")


def check_non_negative(**values: float) -> None:
    """ValueError unless every value is a finite number >= 0 (NaN is not)."""
    for name, value in values.items():
        if not 0 <= value < math.inf:
            raise ValueError(f"{name} must be a finite number >= 0, not {value}")


def run_failed(bench: str, message: str) -> int:
    """A run that measured nothing (no session connected, every session failed): ``message`` as
    one line on stderr; returns the command's exit status, 1."""
    line = " ".join(message.split())  # one line, whatever the message held
    print(f"streampunct bench {bench}: error: {line}", file=sys.stderr, flush=True)
    return 1


class RunFailed(Exception):
    """Raised by a bench whose run measured nothing and wrote nothing (every session failed):
    its command prints the message with :func:`run_failed` and exits with status 1."""


def count_text(counts: dict) -> str:
    """``{"connect:ConnectionRefusedError": 3}`` as ``connect:ConnectionRefusedError=3`` (none: ``none``)."""
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "none"


def write_result(name: str, payload: dict, out_dir: Path | None = None, *, command: str | None = None) -> Path:
    """Write ``payload`` (plus machine, time and command) as ``<out_dir>/<name>.json``, whole or
    not at all (a file there before stays as it was if the write fails; one it replaces is named
    on stderr)."""
    from streampunct.text.textfile import write_text_atomically

    out_dir = prepare_out_dir(out_dir)
    record = {
        "benchmark": name,
        "command": command or " ".join(["streampunct", *sys.argv[1:]]),
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "machine": machine(),
        **payload,
    }
    path = out_dir / f"{name}.json"
    if path.is_file():  # the default folders hold the figures the docs cite (benchmarks/results/...)
        try:
            before = json.loads(path.read_text(encoding="utf-8")).get("measured_at", "an unknown time")
        except (OSError, ValueError, AttributeError):
            before = "an unreadable file"
        print(f"replacing {path} (measured at {before}); --out-dir or --name keeps it", file=sys.stderr)
    write_text_atomically(path, json.dumps(record, indent=2) + "\n")
    return path


def publish(name: str, payload: dict, out_dir: Path, *, command: str | None, plot, summary) -> None:
    """Write the result JSON, its plot (``plot(payload, png_path) -> path or None``) and print
    ``summary(payload)`` with where the files went."""
    path = write_result(name, payload, out_dir, command=command)
    png = plot(payload, Path(out_dir) / f"{name}.png")
    print(summary(payload))
    print(f"wrote {path}" + (f" and {png}" if png else ""))


def percentile(values, q: float) -> float:
    import numpy as np

    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else float("nan")


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (with a note) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no plot ({extra_hint('train')})")
        return None
    return plt


def run_module(main: Callable[[], int | None], prog: str) -> int:
    """``python -m benchmarks.NAME``: ``main()`` behind the CLI's error boundary
    (:func:`streampunct.cli.run_command`), as ``streampunct bench`` runs it: the project's
    errors, engine errors and wrong paths are one line (``PROG: error: ...``) and status 2."""
    from streampunct.cli import run_command

    return run_command(lambda _args: main(), None, prog)
