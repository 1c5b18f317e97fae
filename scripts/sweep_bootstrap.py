"""Is a step of the streaming sweep beyond noise? A paired bootstrap over bench live's segments.

    python scripts/sweep_bootstrap.py [--data data/iwslt2011/test2011] [--rc 4 8 15]
    python scripts/sweep_bootstrap.py --model models/base --cache-pair   # cached - whole windows

Plays the live sweep's schedules (bench live's 60 segments, 1-4-word chunks,
``max_delay_ms`` 60000, the shipped model with its defaults, cached left
context where the folder has it) through the simulation, which gives the
server's labels on every word (docs/results.md, "Cached left context"), then
resamples the segments 1,000 times and prints, for each pair of right
contexts, the mean F1 difference and its 95% interval. With ``--cache-pair``
it compares instead whole windows and cached left context at the server's
defaults (right context 3, 2 s bound: bench live's own schedules). Reporting
only: it chooses nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.live_bench import segments  # noqa: E402
from streampunct.data import read_word_labels  # noqa: E402
from streampunct.evaluation import live_schedule, schedule_labels, score  # noqa: E402
from streampunct.metrics import evaluate  # noqa: E402
from streampunct.options import SessionOptions  # noqa: E402
from streampunct.punctuator import Punctuator  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("data/iwslt2011/test2011"))
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--rc", type=int, nargs="+", default=[4, 8, 15])
    ap.add_argument("--sessions", type=int, default=60)
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--cache-pair", action="store_true",
                    help="compare whole windows with cached left context at the server's defaults")
    args = ap.parse_args()
    data = read_word_labels(args.data)
    spans = segments(len(data.words), args.sessions)
    punct = Punctuator.from_model_dir(args.model)
    engine = punct.stream_engine("auto", intra_op_threads=2)
    labels: dict[object, list[list[int]]] = {}
    variants: list[tuple[object, SessionOptions, object]] = [
        (rc, SessionOptions(right_context=rc, max_delay_ms=60000), engine) for rc in args.rc]
    if args.cache_pair:
        if engine is None:
            raise SystemExit(f"{punct.info.path} has no streaming graph: nothing to compare")
        variants = [("whole windows", SessionOptions(), None), ("cached", SessionOptions(), engine)]
    for key, options, stream in variants:
        labels[key] = [schedule_labels(live_schedule(data.words[a:b], seed=k), punct.aligner, punct.stream_window,
                                       punct.engine.infer, options, stream_engine=stream)
                       for k, (a, b) in enumerate(spans)]
        name = key if isinstance(key, str) else f"right_context {key}"
        print(f"{name}: overall F1 {score(data.labels, sum(labels[key], [])).overall_f1:.2f}", flush=True)
    gold = [data.labels[a:b] for a, b in spans]
    rng = np.random.default_rng(0)

    def f1(key: object, idx: np.ndarray) -> float:
        return evaluate([x for i in idx for x in gold[i]], [x for i in idx for x in labels[key][i]]).overall_f1

    keys = [key for key, _, _ in variants]
    for a, b in zip(keys, keys[1:], strict=False):
        diffs = []
        for _ in range(args.samples):
            idx = rng.integers(0, len(spans), len(spans))
            diffs.append(f1(b, idx) - f1(a, idx))
        d = np.asarray(diffs)
        pair = f"{b} - {a}" if args.cache_pair else f"rc {b} - rc {a}"
        print(f"{pair}: {d.mean():+.2f}, 95% interval [{np.percentile(d, 2.5):+.2f}, "
              f"{np.percentile(d, 97.5):+.2f}]")
    punct.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
