"""``streampunct bench accuracy|live|load|engine|soak|flood|itn|failover|triton|hypotheses``: the benchmarks.

Registered under the ``streampunct.commands`` entry-point group (pyproject.toml).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from benchmarks.common import RESULTS_DIR, result_stem

NAME = "bench"
HELP = ("benchmarks: accuracy vs latency, live accuracy through a server, streaming load, engine speed, "
        "memory soak, one client flooding the server")

def add_arguments(p: argparse.ArgumentParser) -> None:
    from benchmarks.engine_bench import add_engine_arguments
    from benchmarks.failover_bench import add_failover_arguments
    from benchmarks.flood_bench import add_flood_arguments
    from benchmarks.hypothesis_load import add_hypothesis_arguments
    from benchmarks.itn_bench import add_itn_arguments
    from benchmarks.live_bench import add_live_arguments
    from benchmarks.load_bench import add_load_arguments
    from benchmarks.soak_bench import add_soak_arguments
    from benchmarks.triton_bench import add_triton_arguments
    from engines.registry import BACKENDS, StreamCacheMode
    from streampunct.commands.argtypes import (
        choices,
        non_negative_int,
        path_argument,
        positive_float,
    )
    from streampunct.model import model_folder_argument

    sub = p.add_subparsers(dest="bench", metavar="BENCH", required=True)
    a = sub.add_parser("accuracy", help="F1 vs latency: offline decoder and streaming sweeps")
    a.add_argument("--model", type=model_folder_argument, default=None, help="model folder (default: shipped model)")
    a.add_argument("--data", type=path_argument, default=Path("data/iwslt2011/test2011"),
                   help="labeled word<TAB>LABEL file (default: data/iwslt2011/test2011)")
    a.add_argument("--right-context", type=non_negative_int, nargs="+", default=[0, 1, 2, 4, 8], metavar="N",
                   help="streaming sweep: each word final once N words follow it, no delay bound "
                        "(default: 0 1 2 4 8)")
    a.add_argument("--max-delay-ms", type=non_negative_int, nargs="+", default=[400, 800, 1600, 3200], metavar="MS",
                   help="streaming sweep: each word final MS after it was spoken, whatever follows "
                        "(default: 400 800 1600 3200)")
    a.add_argument("--wps", type=positive_float, default=2.5, help="speech rate, words/s (default 2.5)")
    a.add_argument("--engine", default="onnxruntime", choices=list(BACKENDS),
                   help="engine backend (default: onnxruntime)")
    a.add_argument("--stream-cache", choices=choices(StreamCacheMode), default=StreamCacheMode.AUTO.value,
                   help="streams with cached left context, as serve's --stream-cache: auto (default) where "
                        "the model folder has a streaming graph and does not switch it off; off: whole windows")
    a.add_argument("--out-dir", type=path_argument, default=RESULTS_DIR,
                   help="where the JSON and PNG go (default: benchmarks/results)")
    a.add_argument("--name", type=result_stem, default="accuracy", help="result file stem (default: accuracy)")
    a.set_defaults(_bench=_accuracy)
    lv = sub.add_parser("live", help="accuracy through a real server: parallel live streams at real-time pace, "
                                     "checked against the simulation of the same schedules")
    add_live_arguments(lv)
    lv.set_defaults(_bench=_live)
    lp = sub.add_parser("load", help="concurrent real-time sessions: finalize margin, SLO search")
    add_load_arguments(lp)
    lp.set_defaults(_bench=_load)
    e = sub.add_parser("engine", help="engine tokens/s by backend, precision, batch and length")
    add_engine_arguments(e)
    e.set_defaults(_bench=_engine)
    s = sub.add_parser("soak", help="reconnecting real-time sessions for a long time: server RSS and its slope")
    add_soak_arguments(s)
    s.set_defaults(_bench=_soak)
    f = sub.add_parser("flood", help="one client pushing a long stream as fast as it can: every word final once, "
                                     "server RSS")
    add_flood_arguments(f)
    f.set_defaults(_bench=_flood)
    i = sub.add_parser("itn", help="written numbers, dates, times and money through a server at real-time pace: "
                                   "the share of data/itn_phrases.tsv written as expected, words and marks "
                                   "unchanged")
    add_itn_arguments(i)
    i.set_defaults(_bench=_itn)
    fo = sub.add_parser("failover", help="real-time sessions through HAProxy over N replicas while one is "
                                         "SIGKILLed and another SIGTERMed: words lost or duplicated, "
                                         "resumes, caption gaps, finalize margin")
    add_failover_arguments(fo)
    fo.set_defaults(_bench=_failover)
    tr = sub.add_parser("triton", help="Triton as the inference tier: labels through Triton against the local "
                                       "engine, and bench load through the local engine, through Triton, and "
                                       "through two front ends sharing one Triton server")
    add_triton_arguments(tr)
    tr.set_defaults(_bench=_triton)
    hy = sub.add_parser("hypotheses", help="live caption sessions sending two interim hypotheses before each "
                                           "commit, partials on: the p95 finalize margin per session")
    add_hypothesis_arguments(hy)
    hy.set_defaults(_bench=_hypotheses)


def _command() -> str:
    return "streampunct " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _accuracy(args: argparse.Namespace) -> int:
    from benchmarks.accuracy_bench import AccuracyBenchConfig, run_accuracy_bench

    cfg = AccuracyBenchConfig(
        model_dir=args.model, data=args.data, right_contexts=tuple(args.right_context),
        delays_ms=tuple(args.max_delay_ms), words_per_second=args.wps, engine=args.engine,
        stream_cache=args.stream_cache, out_dir=args.out_dir, name=args.name,
    )
    run_accuracy_bench(cfg, command=_command())
    return 0


def _live(args: argparse.Namespace) -> int:
    from benchmarks.live_bench import run_live_from_args

    return run_live_from_args(args, command=_command())


def _load(args: argparse.Namespace) -> int:
    from benchmarks.load_bench import run_load_from_args

    return run_load_from_args(args, command=_command())


def _engine(args: argparse.Namespace) -> int:
    from benchmarks.engine_bench import run_engine_from_args

    return run_engine_from_args(args, command=_command())


def _soak(args: argparse.Namespace) -> int:
    from benchmarks.soak_bench import run_soak_from_args

    return run_soak_from_args(args, command=_command())


def _flood(args: argparse.Namespace) -> int:
    from benchmarks.flood_bench import run_flood_from_args

    return run_flood_from_args(args, command=_command())


def _itn(args: argparse.Namespace) -> int:
    from benchmarks.itn_bench import run_itn_from_args

    return run_itn_from_args(args, command=_command())


def _triton(args: argparse.Namespace) -> int:
    from benchmarks.triton_bench import run_triton_from_args

    return run_triton_from_args(args, command=_command())


def _hypotheses(args: argparse.Namespace) -> int:
    from benchmarks.hypothesis_load import run_hypothesis_from_args

    return run_hypothesis_from_args(args, command=_command())


def _failover(args: argparse.Namespace) -> int:
    from benchmarks.failover_bench import run_failover_from_args

    return run_failover_from_args(args, command=_command())


def run(args: argparse.Namespace) -> int:
    return args._bench(args)
