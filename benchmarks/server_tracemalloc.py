"""Run a server module under tracemalloc and report where its memory grew (``bench soak --tracemalloc``).

::

    python -m benchmarks.server_tracemalloc [--trim] OUT.json -m streampunct.cli serve --port 0 ...

Starts tracemalloc, then runs the module as ``__main__`` in this process (so
the server's PID, and its RSS, are this process'). ``SIGUSR1`` drives it:
the first signal takes the baseline snapshot (the soak sends it when its
warm-up ends; every snapshot follows a full ``gc.collect()``); every later one compares a new snapshot with the baseline and
writes the top growth, by source line, to ``OUT.json``. At exit, if no
comparison was written, one is written then (after the server's graceful
shutdown: what is left is what outlived the sessions).

Beside Python's allocations the report has glibc's heap figures at both
snapshots (``mallinfo2``: bytes in use, free bytes kept in the arenas, mmapped
bytes) and the RSS; with ``--trim`` (before ``OUT.json``) each comparison then
calls ``malloc_trim(0)`` and reports the RSS after it. Memory that the RSS
holds but neither Python nor malloc's in-use bytes account for is memory
freed and kept by the allocator (fragmentation), or native memory outside
malloc.

tracemalloc slows allocation and adds its own memory: RSS figures of a run
under it are not comparable with a plain run.
"""

from __future__ import annotations

import gc
import json
import linecache
import os
import runpy
import signal
import sys
import time
import tracemalloc
from pathlib import Path

from streampunct.server.allocator import heap_figures
from streampunct.server.allocator import trim as malloc_trim

#: Frames kept per allocation (the lines of the server's own code show up a few frames up).
FRAMES = 8
#: Rows written.
TOP = 30


def growth_report(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, top: int = TOP) -> dict:
    """The ``top`` source lines whose allocations grew most from ``before`` to ``after``."""
    ignore = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, linecache.__file__)]
    before, after = before.filter_traces(ignore), after.filter_traces(ignore)
    stats = after.compare_to(before, "lineno")
    rows = []
    for stat in sorted(stats, key=lambda s: s.size_diff, reverse=True)[:top]:
        frame = stat.traceback[0]
        rows.append({
            "where": f"{frame.filename}:{frame.lineno}",
            "line": linecache.getline(frame.filename, frame.lineno).strip(),
            "size_diff_kb": round(stat.size_diff / 1024, 1),
            "size_kb": round(stat.size / 1024, 1),
            "count_diff": stat.count_diff,
        })
    total_before = sum(s.size for s in before.statistics("filename"))
    total_after = sum(s.size for s in after.statistics("filename"))
    return {
        "traced_mb_before": round(total_before / 2**20, 2),
        "traced_mb_after": round(total_after / 2**20, 2),
        "top_growth": rows,
    }


def rss_mb() -> float | None:
    """This process' resident set, MB (Linux ``/proc``)."""
    try:
        fields = Path("/proc/self/statm").read_text().split()
    except OSError:
        return None
    return int(fields[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _snapshot() -> tracemalloc.Snapshot:
    """A snapshot after a full collection, so that garbage in reference cycles is not growth."""
    gc.collect()
    return tracemalloc.take_snapshot()


class _Recorder:
    def __init__(self, out: Path, *, trim: bool = False) -> None:
        self.out = out
        self.trim = trim
        self.baseline: tracemalloc.Snapshot | None = None
        self.baseline_native: dict = {}
        self.baseline_at = time.monotonic()
        self.written = False

    def on_signal(self, signum: int, frame: object) -> None:
        if self.baseline is None:
            self.baseline = _snapshot()
            self.baseline_native = {"rss_mb": _round(rss_mb()), "heap": heap_figures()}
            self.baseline_at = time.monotonic()
        else:
            self.write("signal")

    def write(self, when: str) -> None:
        if self.baseline is None:
            return
        report = growth_report(self.baseline, _snapshot())
        report.update(when=when, seconds_since_baseline=round(time.monotonic() - self.baseline_at, 1))
        native: dict = {"before": self.baseline_native, "after": {"rss_mb": _round(rss_mb()), "heap": heap_figures()}}
        if self.trim:
            native["trimmed"] = malloc_trim()
            native["after_trim"] = {"rss_mb": _round(rss_mb()), "heap": heap_figures()}
        report["native"] = native
        tmp = self.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.out)
        self.written = True


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def main(argv: list[str]) -> int:
    trim = bool(argv) and argv[0] == "--trim"
    argv = argv[1:] if trim else argv
    if len(argv) < 3 or argv[1] != "-m":
        print("usage: python -m benchmarks.server_tracemalloc [--trim] OUT.json -m MODULE [ARGS...]",
              file=sys.stderr)
        return 2
    out, module, args = Path(argv[0]), argv[2], argv[3:]
    tracemalloc.start(FRAMES)
    recorder = _Recorder(out, trim=trim)
    signal.signal(signal.SIGUSR1, recorder.on_signal)
    sys.argv = [module, *args]
    code: int | str | None = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
    finally:
        if not recorder.written:
            recorder.write("exit")
    return code if isinstance(code, int) else (0 if code is None else 1)


if __name__ == "__main__":
    from benchmarks.common import run_module

    raise SystemExit(run_module(lambda: main(sys.argv[1:]), "python -m benchmarks.server_tracemalloc"))
