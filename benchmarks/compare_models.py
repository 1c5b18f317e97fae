"""Two runtime model folders on validation data: each one's F1 and their label agreement.

For comparing two builds of the same model (8-bit vs 7-bit int8 weights, a
re-export, a new ONNX Runtime) on the validation set, decoded exactly as the
service decodes (offline double-overlap windows, each folder's own window
unless ``--window`` is given). Never run on a test set: the validation sources
of the training package are used, and test-set names are refused there.

    python -m benchmarks.compare_models build/default_8bit models/default \\
        --json benchmarks/results/int8_7bit_vs_8bit.json
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.common import prepare_out_file, run_module, write_result
from streampunct.core.windowing import WindowConfig
from streampunct.evaluation.scores import evaluate


def folder_labels(folder: Path, docs, window: WindowConfig | None) -> tuple[np.ndarray, dict]:
    from training.evaluation import RuntimeModel

    model = RuntimeModel.open(folder)
    try:
        logits = model.logits(docs, window)
        return np.concatenate([lg.argmax(-1) for lg in logits]), (window or model.window).to_dict()
    finally:
        model.close()


def compare(a: Path, b: Path, docs, window: WindowConfig | None = None) -> dict:
    gold = np.asarray([x for d in docs for x in d.labels], dtype=np.int64)
    out: dict = {"n_words": int(len(gold)), "models": {}}
    preds = []
    for folder in (a, b):
        pred, win = folder_labels(folder, docs, window)
        preds.append(pred)
        out["models"][str(folder)] = {"window": win, **evaluate(gold, pred).to_dict()}
    out["label_agreement"] = round(100 * float(np.mean(preds[0] == preds[1])), 2)
    out["f1_difference"] = round(out["models"][str(b)]["overall_f1"] - out["models"][str(a)]["overall_f1"], 2)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    from streampunct.commands.argtypes import non_negative_int
    from training.data import data_root, load_validation_docs, resolve_cache

    ap = argparse.ArgumentParser(prog="python -m benchmarks.compare_models", description=__doc__.split("\n")[0])
    ap.add_argument("a", type=Path, help="first runtime model folder")
    ap.add_argument("b", type=Path, help="second runtime model folder")
    ap.add_argument("--valid", default="dev2010", help="validation source of the training package (default dev2010)")
    ap.add_argument("--window", type=non_negative_int, nargs=3, default=None, metavar=("W", "L", "R"),
                    help="one window for both (default: each folder's own)")
    ap.add_argument("--data-root", default="", help="data folder (default: $STREAMPUNCT_DATA or ../shared/data)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = ap.parse_args(argv)
    from engines.base import EngineError
    from streampunct.errors import StreampunctError
    from streampunct.model import load_model_info

    if args.a.resolve() == args.b.resolve():
        ap.error(f"a and b are the same folder ({args.a}): nothing to compare")
    window = None
    if args.window:
        try:
            window = WindowConfig(*args.window)
        except ValueError as e:
            ap.error(f"argument --window: {e}")
    if args.json:
        prepare_out_file(args.json.with_name(args.json.stem + ".json"), ap)  # where write_result puts it

    try:
        for folder in (args.a, args.b):
            load_model_info(folder)  # a missing or broken model folder, before loading any data
        docs = load_validation_docs(args.valid, data_root(args.data_root), resolve_cache("cache"))
        res = compare(args.a, args.b, docs, window)
    except (StreampunctError, EngineError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    res["valid"] = args.valid
    for name, m in res["models"].items():
        per = ", ".join(f"{k} {v['f1']:.1f}" for k, v in m["per_class"].items())
        print(f"{name}: overall F1 {m['overall_f1']:.2f}, macro {m['macro_f1']:.2f} ({per})")
    print(f"label agreement {res['label_agreement']:.2f}% of {res['n_words']} words; "
          f"F1 b - a = {res['f1_difference']:+.2f}")
    if args.json:
        command = " ".join(["python -m benchmarks.compare_models", *(argv if argv is not None else sys.argv[1:])])
        path = write_result(args.json.stem, res, args.json.parent, command=command)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_module(main, "python -m benchmarks.compare_models"))
