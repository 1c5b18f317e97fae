"""Where a server's CPU goes: py-spy's sampled stacks, summed into the stages of a finalized word.

``streampunct bench load --sample-profile`` attaches py-spy (the ``dev`` extra) to the started
server for most of each step and adds this breakdown to the step's figures. On its own::

    py-spy record -p PID -d 20 -r 100 -f raw --threads --nonblocking --subprocesses -o stacks.txt
    python -m benchmarks.cpu_profile stacks.txt [--cpu-ms-per-word MS] [--json]

Each sampled stack counts once, for the first stage that one of its frames names, read from the
innermost frame out. Frames of the interpreter's plumbing (asyncio's loop, threads, runpy, the
executor) name no stage, so that a socket write under the WebSocket library's ``send`` counts as
sending, not as the event loop; a stack made only of plumbing is the event loop itself.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: The stages, in the order the tables list them: (name, [(file part, function regex), ...]).
#: A frame is ``function (path:line)``; a rule matches when its file part is in the path and its
#: regex matches the function (``""``: any function of the file).
STAGES: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("engine call (model)", (("onnxruntime/", ""), ("torch/", ""), ("engines/", r"infer|run"))),
    ("tokenization", (("tokenizers", ""), ("core/alignment.py", ""), ("streampunct/alignment.py", ""))),
    ("JSON", (("json/", ""), ("orjson", ""), ("msgspec", ""))),
    ("frames in (parsing)", (("websockets/", r"parse|recv|read|data_received|receive|feed|_ready"),)),
    ("frames out (encoding, sending)", (("websockets/", r"send|write|serialize|drain|ping|pong|close"),)),
    ("wire messages", (("core/wire.py", ""), ("streampunct/protocol.py", ""))),
    ("stream cache and padding", (("stream_cache.py", ""),)),
    ("session protocol and stream state", (
        ("session_protocol.py", ""), ("stream_state.py", ""), ("engine_call.py", ""), ("windowing.py", ""),
        ("written_form.py", ""), ("streampunct/labels.py", ""), ("normalize.py", ""), ("streampunct/text.py", ""),
        ("latency.py", ""))),
    ("batching", (("batcher.py", ""),)),
    ("server glue (sessions, metrics, HTTP)", (
        ("server/", ""), ("streampunct/session.py", ""), ("streampunct/server.py", ""),
        ("server_metrics.py", ""), ("prometheus_client", ""), ("http_policy.py", ""))),
    ("websockets, other", (("websockets/", ""),)),
)
#: Plumbing: frames that name no stage (the loop, threads, the executor, module start-up).
PLUMBING = ("asyncio/", "threading.py", "concurrent/futures", "<frozen runpy>", "selectors.py", "socket.py",
            "ssl.py", "contextlib.py", "streampunct/cli.py", "commands/serve.py", "<string>", "queue.py",
            "functools.py", "typing.py", "dataclasses.py")
#: Entry points that run the loop: (file part, function). Under uvloop the loop's own work (polling,
#: socket reads and writes, timers) runs in C below ``asyncio.Runner.run``, so its samples end in the
#: server's entry frame; they are the event loop, not the server's glue (nor, through the frames
#: that start the process, "other").
ENTRY_FRAMES = (("server/app.py", "run_server"), ("server/workers.py", "worker_main"))
EVENT_LOOP = "event loop (asyncio, selectors)"
OTHER = "other"

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<path>[^()]*?)(?::\d+)?\)$")


@dataclass(frozen=True)
class Breakdown:
    """Samples per stage, with their shares."""

    samples: Counter

    @property
    def total(self) -> int:
        return sum(self.samples.values())

    def shares(self) -> dict[str, float]:
        total = self.total or 1
        order = [name for name, _ in STAGES] + [EVENT_LOOP, OTHER]
        return {name: self.samples[name] / total for name in order if self.samples[name]}

    def to_json(self, cpu_ms_per_word: float | None = None) -> dict:
        out: dict = {"samples": self.total, "shares": {k: round(v, 4) for k, v in self.shares().items()}}
        if cpu_ms_per_word is not None:
            out["ms_per_word"] = {k: round(v * cpu_ms_per_word, 3) for k, v in self.shares().items()}
        return out


def parse_frame(frame: str) -> tuple[str, str]:
    """``"Session._write (streampunct/server/session.py:210)"`` -> (function, path)."""
    m = _FRAME.match(frame.strip())
    return (m.group("func"), m.group("path")) if m else (frame.strip(), "")


def stage_of(frames: Sequence[str]) -> str:
    """The stage of one stack (outermost frame first, as py-spy writes them)."""
    plumbing_only = True
    for frame in reversed(frames):
        func, path = parse_frame(frame)
        if frame.startswith("thread (") or frame.startswith("process "):
            continue
        if any(part in path and func == entry for part, entry in ENTRY_FRAMES):
            break  # the frames outside it start the process: no stage
        for name, rules in STAGES:
            if any(part in path and (not pattern or re.search(pattern, func)) for part, pattern in rules):
                return name
        if not any(p in path for p in PLUMBING):
            plumbing_only = False
    return EVENT_LOOP if plumbing_only else OTHER


def read_collapsed(lines: Iterable[str]) -> Breakdown:
    """py-spy's ``--format raw`` (collapsed stacks: ``frame;frame;... COUNT`` a line)."""
    samples: Counter = Counter()
    for line in lines:
        line = line.rstrip("\n")
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            raise ValueError(f"not a collapsed stack line (no sample count at the end): {line[:80]!r}")
        samples[stage_of(stack.split(";"))] += int(count)
    return Breakdown(samples)


def py_spy_command(pid: int, seconds: float, out: Path, rate: int = 100) -> list[str]:
    """The py-spy command that samples ``pid`` (its threads and child processes) for ``seconds``."""
    beside = Path(sys.executable).parent / "py-spy"  # the interpreter's environment, on PATH or not
    exe = str(beside) if beside.is_file() else shutil.which("py-spy")
    if exe is None:
        from streampunct.errors import DependencyError  # a one-line error at the command line

        raise DependencyError("py-spy is not installed: pip install -e '.[dev]' (or pip install py-spy)")
    return [exe, "record", "-p", str(pid), "-d", str(max(1, int(seconds))), "-r", str(rate), "-f", "raw",
            "--threads", "--nonblocking", "--subprocesses", "-o", str(out)]


def format_breakdown(b: Breakdown, cpu_ms_per_word: float | None = None) -> str:
    rows = [f"{'stage':40s} {'share':>7s}" + (f" {'ms/word':>8s}" if cpu_ms_per_word is not None else "")]
    for name, share in sorted(b.shares().items(), key=lambda kv: -kv[1]):
        row = f"{name:40s} {100 * share:6.1f}%"
        if cpu_ms_per_word is not None:
            row += f" {share * cpu_ms_per_word:8.3f}"
        rows.append(row)
    rows.append(f"({b.total} samples)")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    from streampunct.commands.argtypes import non_negative_float

    ap = argparse.ArgumentParser(prog="python -m benchmarks.cpu_profile", description=__doc__.split("\n")[0])
    ap.add_argument("stacks", type=Path, help="py-spy record --format raw output")
    ap.add_argument("--cpu-ms-per-word", type=non_negative_float, default=None,
                    help="the server's CPU per finalized word (bench load's cpu/word) to split by stage")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    if not args.stacks.is_file():
        ap.error(f"no such file: {args.stacks}")
    try:
        b = read_collapsed(args.stacks.read_text().splitlines())
    except ValueError as e:
        ap.error(str(e))
    print(json.dumps(b.to_json(cpu_ms_per_word=args.cpu_ms_per_word), indent=1) if args.json
          else format_breakdown(b, args.cpu_ms_per_word))
    return 0


if __name__ == "__main__":
    from benchmarks.common import run_module

    raise SystemExit(run_module(main, "python -m benchmarks.cpu_profile"))
