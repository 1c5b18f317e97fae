"""``bench triton``: Triton as the inference tier, against the local engine, in one run.

Three parts, on one model folder and one Triton server (NVIDIA's PyTriton with a Python
model running the folder's graph, :mod:`engines.build.triton_pytriton`, started on free loopback
ports; or ``--triton-url`` of a running one):

1. **Labels** (``--data``, default test2011): the offline decoder's labels and case classes of
   every word through the local ONNX Runtime engine and through the ``triton`` engine, the
   number that differ, and both scored against the reference (overall micro F1).
   With an fp32 graph (rows independent of their batch) they must be equal.
2. **Load**: ``bench load``'s ramp (real-time sessions, p95 finalize margin, exactly-once
   check) against ``serve --engine onnxruntime`` and then ``serve --engine triton`` on the same
   schedule, one after the other on the same machine.
3. **Two front ends sharing one Triton server** (``--two-front-ends``): two ``serve --engine
   triton`` processes, each with half of every step's sessions at the same time
   (:func:`benchmarks.load_bench.run_step` on both); per front end the p95 margin and the
   finals check, and Triton's CPU.

Triton's CPU (the PyTriton process, ``tritonserver`` and its Python stub) is reported beside
the front end's: on one host the two tiers share the cores, which a GPU host would not.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common import (
    RESULTS_DIR,
    machine,
    prepare_out_dir,
    result_stem,
    run_module,
    write_result,
)
from benchmarks.load_bench import LoadBenchConfig, load_corpus, run_load_bench, run_step
from benchmarks.server_under_test import ServerProcess, ServerUnderTest
from streampunct.errors import DependencyError
from streampunct.model import model_folder_argument

DEFAULT_OUT = RESULTS_DIR / "triton"


@dataclass(frozen=True)
class TritonBenchConfig:
    """Options of ``bench triton``.

    Attributes:
        model_dir: the model folder (front ends and Triton); an fp32 graph makes labels
            comparable row for row.
        data: ``word<TAB>LABEL`` file of the label comparison (None: skip it).
        triton_url: a running Triton server's gRPC ``host:port`` (None: start PyTriton).
        triton_threads: ONNX Runtime threads of the started Triton's model (None: every core).
        triton_max_batch, triton_queue_delay_us: its dynamic batcher.
        local_threads: ONNX Runtime threads of the local engine in the label comparison.
        sessions, duration_s: the load ramp (None: skip the load part).
        engine_workers: ``serve --engine-workers`` of the triton front ends (requests in flight each).
        two_front_ends: also run the ramp through two front ends sharing the Triton server.
        slo_p95_ms: ``bench load``'s SLO; a ramp stops at the first step that misses it (raise it
            to run every step on a loaded machine and compare the margins themselves).
        nice: the started Triton server's niceness (the front ends inherit the bench's).
        out_dir, name: ``<name>.json``.
    """

    model_dir: Path
    data: Path | None = Path("data/iwslt2011/test2011")
    triton_url: str | None = None
    triton_threads: int | None = None
    triton_max_batch: int = 64
    triton_queue_delay_us: int = 1000
    local_threads: int | None = None
    sessions: tuple[int, ...] | None = (20, 40, 80)
    duration_s: float = 20.0
    engine_workers: int | None = None
    two_front_ends: bool = False
    slo_p95_ms: float = 100.0
    max_total_s: float = 540.0
    nice: int = 0
    out_dir: Path = DEFAULT_OUT
    name: str = "triton"


def compare_labels(model_dir: Path, data: Path, triton_url: str, *, local_threads: int | None = None) -> dict:
    """Offline labels and case classes of ``data``'s words through the local engine and Triton."""
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.evaluation.accuracy import score
    from streampunct.text.word_labels import read_word_labels

    words = read_word_labels(data)
    sides: dict[str, dict] = {}
    outputs: dict[str, tuple[list[int], list[int] | None]] = {}
    for side, engine, options in (("local", "onnxruntime", {"intra_op_threads": local_threads} if local_threads
                                   else {}), ("triton", "triton", {"url": triton_url})):
        punct = OfflineDecoder.from_model_dir(model_dir, engine=engine, **options)
        try:
            t0 = time.perf_counter()
            labels, cases = punct.labels_and_cases(words.words, end_of_stream=False)
            secs = time.perf_counter() - t0
        finally:
            punct.close()
        outputs[side] = (labels, cases)
        report = score(words.labels, labels)
        sides[side] = {"engine": engine, "overall_f1": report.to_dict()["overall_f1"],
                       "words_per_second": round(len(words) / secs, 1)}
        print(f"  {side:<6} ({engine}): overall F1 {sides[side]['overall_f1']:.2f}, "
              f"{sides[side]['words_per_second']:.0f} words/s", flush=True)
    (la, ca), (lb, cb) = outputs["local"], outputs["triton"]
    return {
        "data": str(data), "n_words": len(words), "sides": sides,
        "labels_differ": sum(a != b for a, b in zip(la, lb, strict=True)),
        "cases_differ": None if ca is None or cb is None else sum(a != b for a, b in zip(ca, cb, strict=True)),
    }


def _step_row(step: dict) -> dict:
    """The figures of one load step that the comparison shows."""
    server = step.get("server", {})
    return {"sessions": step["sessions"], "p95_margin_ms": step["margin_ms"]["p95"],
            "p50_margin_ms": step["margin_ms"]["p50"], "finalized_wps": step["finalized_wps"],
            "offered_wps": step["offered_wps"], "lost": step["check"]["lost"],
            "duplicated": step["check"]["duplicated"], "slo_met": step["slo_met"],
            "batch_mean": (server.get("batch_size") or {}).get("mean"),
            "engine_busy": server.get("engine_busy"), "front_end_cpu_cores": server.get("cpu_cores"),
            "errors": step["errors"]}


def _load_cfg(cfg: TritonBenchConfig, engine: str, out_dir: Path, name: str, options: tuple[str, ...] = (),
              workers: int | None = None) -> LoadBenchConfig:
    server = ServerUnderTest(model_dir=cfg.model_dir, engine=engine, engine_options=options, engine_workers=workers)
    return LoadBenchConfig(server=server, sessions=tuple(cfg.sessions or ()), duration_s=cfg.duration_s,
                           refine_steps=0, slo_p95_ms=cfg.slo_p95_ms, max_total_s=cfg.max_total_s,
                           out_dir=out_dir, name=name)


class _Cpu:
    """CPU cores a process tree used between two reads (None without a started Triton)."""

    def __init__(self, triton) -> None:
        self.triton = triton
        self.t0, self.c0 = time.monotonic(), triton.cpu_seconds() if triton is not None else None

    def cores(self) -> float | None:
        c1 = self.triton.cpu_seconds() if self.triton is not None else None
        if c1 is None or self.c0 is None:
            return None
        return round((c1 - self.c0) / (time.monotonic() - self.t0), 2)


def load_ramp(cfg: TritonBenchConfig, engine: str, triton, workdir: Path, options: tuple[str, ...] = (),
              workers: int | None = None) -> dict:
    """``bench load``'s ramp against one front end with ``engine``; Triton's CPU over the ramp."""
    cpu = _Cpu(triton if engine == "triton" else None)
    payload = run_load_bench(_load_cfg(cfg, engine, workdir, f"load_{engine}", options, workers))
    return {"engine": engine, "max_sessions_meeting_slo": payload["max_sessions_meeting_slo"],
            "stopped": payload["stopped"], "triton_cpu_cores": cpu.cores(),
            "steps": [_step_row(s) for s in payload["steps"]], "notes": payload["notes"]}


async def _two_front_end_steps(cfg: TritonBenchConfig, urls: Sequence[str], servers: Sequence[ServerProcess],
                               triton) -> list[dict]:
    load_cfg = _load_cfg(cfg, "triton", cfg.out_dir, "unused")
    corpus = load_corpus(load_cfg.data)
    rows = []
    for n in sorted(set(cfg.sessions or ())):
        half = [n // 2, n - n // 2]
        print(f"step N={n}: two front ends, {half[0]} + {half[1]} sessions ...", flush=True)
        cpu = _Cpu(triton)
        steps = await asyncio.gather(*(
            run_step(url, k, load_cfg, corpus, server, seed=load_cfg.seed * 100003 + n + i)
            for i, (url, k, server) in enumerate(zip(urls, half, servers, strict=True))))
        row = {"sessions": n, "front_ends": [_step_row(s) for s in steps], "triton_cpu_cores": cpu.cores()}
        row["p95_margin_ms"] = max((s["margin_ms"]["p95"] or 0.0) for s in steps)
        row["lost"] = sum(s["check"]["lost"] for s in steps)
        row["duplicated"] = sum(s["check"]["duplicated"] for s in steps)
        row["slo_met"] = all(s["slo_met"] for s in steps)
        print(f"  p95 margin (worse front end) {row['p95_margin_ms']} ms, lost {row['lost']}, "
              f"dup {row['duplicated']}, Triton cpu {row['triton_cpu_cores']}", flush=True)
        rows.append(row)
        await asyncio.sleep(1.0)
    return rows


def two_front_ends(cfg: TritonBenchConfig, triton_url: str, triton, workdir: Path) -> dict:
    """Two ``serve --engine triton`` processes on one Triton server, half the sessions each."""
    load_cfg = _load_cfg(cfg, "triton", workdir, "unused", (f"url={triton_url}",), cfg.engine_workers)
    max_sessions = max(cfg.sessions or (1,))
    for i in range(2):
        (workdir / f"fe{i}").mkdir(parents=True, exist_ok=True)
    servers = [ServerProcess(load_cfg.started_server(), max_sessions=max_sessions + 16, workdir=workdir / f"fe{i}")
               for i in range(2)]
    try:
        urls = [server.start() for server in servers]
        rows = asyncio.run(_two_front_end_steps(cfg, urls, servers, triton))
    finally:
        for server in servers:
            server.stop()
    return {"front_ends": 2, "steps": rows}


#: How long a bench waits for a Triton server it was given (--triton-url): one that runs already.
EXTERNAL_READY_S = 10.0


def _check_external(model_dir: Path, url: str) -> None:
    """A Triton server given by ``--triton-url`` serves the model now (an ``ArtifactError`` within
    :data:`EXTERNAL_READY_S` otherwise), before the local labels and load steps run."""
    from engines.registry import load_engine

    load_engine("triton", model_dir, url=url, ready_timeout_s=EXTERNAL_READY_S).close()


def run_triton_bench(cfg: TritonBenchConfig, *, command: str | None = None) -> dict:
    from engines.build.triton_pytriton import PyTritonProcess, server_python

    started = time.monotonic()
    prepare_out_dir(cfg.out_dir, f"{cfg.name}.json")
    payload: dict = {"model_dir": str(cfg.model_dir), "config": {
        k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()}}
    with tempfile.TemporaryDirectory(prefix="streampunct-triton-") as tmp:
        workdir = Path(tmp)
        triton = None
        try:
            if cfg.triton_url is None:
                python = server_python()
                if python is None:
                    raise DependencyError("no PyTriton environment with numpy < 2: run bash scripts/setup_triton_server.sh "
                                       "or pass --triton-url of a running Triton server")
                triton = PyTritonProcess(cfg.model_dir, python=python, log_path=workdir / "triton.log",
                                         max_batch=cfg.triton_max_batch, max_queue_delay_us=cfg.triton_queue_delay_us,
                                         threads=cfg.triton_threads, nice=cfg.nice)
                print(f"starting Triton (PyTriton) for {cfg.model_dir} ...", flush=True)
                url = triton.start()
                print(f"Triton ready at {url} after {time.monotonic() - started:.1f}s", flush=True)
                payload["triton"] = {"server": "PyTriton (tritonserver + Python model on ONNX Runtime)", "url": url,
                                     "max_batch": cfg.triton_max_batch, "queue_delay_us": cfg.triton_queue_delay_us,
                                     "threads": cfg.triton_threads}
            else:
                url = cfg.triton_url
                payload["triton"] = {"server": "external", "url": url}
                _check_external(cfg.model_dir, url)
            if cfg.data is not None:
                print(f"labels on {cfg.data}: local engine vs Triton", flush=True)
                payload["labels"] = compare_labels(cfg.model_dir, cfg.data, url, local_threads=cfg.local_threads)
                print(f"  labels differ: {payload['labels']['labels_differ']} of {payload['labels']['n_words']}, "
                      f"cases differ: {payload['labels']['cases_differ']}", flush=True)
            if cfg.sessions:
                print("load: local engine", flush=True)
                payload["load_local"] = load_ramp(cfg, "onnxruntime", triton, workdir)
                print("load: through Triton", flush=True)
                payload["load_triton"] = load_ramp(cfg, "triton", triton, workdir, (f"url={url}",),
                                                   cfg.engine_workers)
                if cfg.two_front_ends:
                    print("load: two front ends sharing Triton", flush=True)
                    payload["load_two_front_ends"] = two_front_ends(cfg, url, triton, workdir)
        finally:
            if triton is not None:
                triton.stop()
    payload["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    payload["machine_cores"] = machine()["cores"]
    payload["total_s"] = round(time.monotonic() - started, 1)
    path = write_result(cfg.name, payload, cfg.out_dir, command=command)
    print(summary_text(payload))
    print(f"wrote {path}")
    return payload


def summary_text(payload: dict) -> str:
    lines = []
    if "labels" in payload:
        lab = payload["labels"]
        lines.append(f"labels on {Path(lab['data']).name} ({lab['n_words']} words): {lab['labels_differ']} differ, "
                     f"cases {lab['cases_differ']} differ; F1 local {lab['sides']['local']['overall_f1']:.2f}, "
                     f"Triton {lab['sides']['triton']['overall_f1']:.2f}")
    for key in ("load_local", "load_triton"):
        if key in payload:
            part = payload[key]
            lines.append(f"{part['engine']}: most sessions within the SLO {part['max_sessions_meeting_slo']}"
                         + (f", Triton cpu {part['triton_cpu_cores']}" if part["triton_cpu_cores"] is not None else ""))
            for s in part["steps"]:
                lines.append(f"  N={s['sessions']:<4d} p95 margin {s['p95_margin_ms']} ms, lost {s['lost']}, "
                             f"dup {s['duplicated']}, batch mean {s['batch_mean']}, front end cpu "
                             f"{s['front_end_cpu_cores']}, {'SLO met' if s['slo_met'] else 'SLO missed'}")
    if "load_two_front_ends" in payload:
        lines.append("two front ends sharing Triton:")
        for s in payload["load_two_front_ends"]["steps"]:
            lines.append(f"  N={s['sessions']:<4d} p95 margin (worse) {s['p95_margin_ms']} ms, lost {s['lost']}, "
                         f"dup {s['duplicated']}, Triton cpu {s['triton_cpu_cores']}")
    return "\n".join(lines)


def add_triton_arguments(p: argparse.ArgumentParser) -> None:
    from streampunct.commands.argtypes import (
        non_negative_int,
        path_argument,
        positive_float,
        positive_int,
    )

    p.add_argument("--model", type=model_folder_argument, required=True, help="model folder (an fp32 graph makes labels comparable)")
    p.add_argument("--data", type=path_argument, default=Path("data/iwslt2011/test2011"),
                   help="labelled words for the label comparison (default: %(default)s)")
    p.add_argument("--no-labels", action="store_true", help="skip the label comparison")
    p.add_argument("--triton-url", default=None, help="a running Triton's gRPC host:port (default: start PyTriton)")
    p.add_argument("--triton-threads", type=positive_int, default=None,
                   help="ONNX Runtime threads of the started Triton's model")
    p.add_argument("--triton-max-batch", type=positive_int, default=64)
    p.add_argument("--triton-queue-delay-us", type=non_negative_int, default=1000)
    p.add_argument("--local-threads", type=positive_int, default=None, help="ONNX Runtime threads of the local engine")
    p.add_argument("--sessions", type=positive_int, nargs="*", default=[20, 40, 80], metavar="N",
                   help="load ramp (none: skip the load part; default: 20 40 80)")
    p.add_argument("--duration", type=positive_float, default=20.0, help="seconds of speech per session and step")
    p.add_argument("--engine-workers", type=positive_int, default=None,
                   help="serve --engine-workers of the triton front ends")
    p.add_argument("--two-front-ends", action="store_true", help="also two front ends sharing the Triton server")
    p.add_argument("--slo-p95-ms", type=positive_float, default=100.0,
                   help="bench load's SLO on the p95 finalize margin; a ramp stops at the first step that misses "
                        "it (default: %(default)s)")
    p.add_argument("--max-total-s", type=positive_float, default=540.0, help="time budget of each load ramp")
    p.add_argument("--nice", type=int, default=0, help="niceness of the started Triton server")
    p.add_argument("--out-dir", type=path_argument, default=DEFAULT_OUT)
    p.add_argument("--name", type=result_stem, default="triton")


def config_from_args(args: argparse.Namespace) -> TritonBenchConfig:
    return TritonBenchConfig(
        model_dir=args.model, data=None if args.no_labels else args.data, triton_url=args.triton_url,
        triton_threads=args.triton_threads, triton_max_batch=args.triton_max_batch,
        triton_queue_delay_us=args.triton_queue_delay_us, local_threads=args.local_threads,
        sessions=tuple(args.sessions) or None, duration_s=args.duration, engine_workers=args.engine_workers,
        two_front_ends=args.two_front_ends, slo_p95_ms=args.slo_p95_ms, max_total_s=args.max_total_s, nice=args.nice,
        out_dir=args.out_dir, name=args.name,
    )


def run_triton_from_args(args: argparse.Namespace, *, command: str | None = None) -> int:
    from engines.model_meta import has_model_meta
    from streampunct.errors import InputError

    if not has_model_meta(args.model):
        raise InputError(f"--model {args.model} is not a model folder")
    try:
        run_triton_bench(config_from_args(args), command=command)
    except RuntimeError as e:
        raise InputError(str(e)) from None
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.triton_bench", description=__doc__.split("\n")[0])
    add_triton_arguments(p)
    return run_triton_from_args(p.parse_args(argv), command="python -m benchmarks.triton_bench " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    raise SystemExit(run_module(main, "python -m benchmarks.triton_bench"))
