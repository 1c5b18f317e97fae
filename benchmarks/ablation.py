"""Score a set of models once on the IWSLT2011 test sets: the method ablation table.

Each model is ``NAME=FOLDER``: a training checkpoint (torch, fp32) or a
runtime model folder (ONNX Runtime, e.g. ``models/default``). Every model is
decoded with the offline double-overlap decoder at its own stored window
(argmax per word, as served); CRF heads are also scored with Viterbi over the
whole test document. Validation figures are read from the folder's
``streampunct.json`` (they were measured at training time; the test sets
play no part in training, selection or window choice).

    python -m benchmarks.ablation abl_ce=checkpoints/abl_ce/best shipped=models/default \\
        --json benchmarks/results/ablation.json

Prints a Markdown table (validation and test overall micro F1, test
per-class F1) and writes every figure to the JSON file.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, prepare_out_file, run_module, write_result
from engines.model_meta import has_model_meta, read_model_meta
from streampunct.errors import InputError
from streampunct.text.word_labels import read_word_labels

DEFAULT_SETS = ("data/iwslt2011/test2011", "data/iwslt2011/test2011asr")


def _parse_model(spec: str) -> tuple[str, Path]:
    name, sep, folder = spec.partition("=")
    if not sep or not name or not folder:
        raise InputError(f"model {spec!r} must be NAME=FOLDER")
    path = Path(folder)
    if not has_model_meta(path):
        raise InputError(f"{path} is not a model folder or checkpoint (no streampunct.json)")
    return name, path


def _is_checkpoint(path: Path) -> bool:
    return (path / "model.safetensors").is_file() and (path / "head.safetensors").is_file()


def _open(path: Path):
    """(model or None, infer, aligner, window, close, engine name) of a checkpoint or runtime folder."""
    if _is_checkpoint(path):
        from streampunct.core.windowing import WindowConfig
        from training.checkpoint import checkpoint_aligner, load_checkpoint
        from training.model import make_infer

        model, meta = load_checkpoint(path)
        return (model, make_infer(model), checkpoint_aligner(path, meta), WindowConfig(**meta["window"]),
                lambda: None, "torch fp32")
    from training.evaluation import RuntimeModel

    rt = RuntimeModel.open(path)
    engine = "onnxruntime " + ("int8" if any(path.glob("*.int8.onnx")) else "fp32")
    return None, rt.infer, rt.aligner, rt.window, rt.close, engine


def score_model(name: str, path: Path, sets: Sequence[Path]) -> dict[str, Any]:
    from training.data import Document
    from training.evaluation import decode_documents, score

    meta = read_model_meta(path)
    model, infer, aligner, window, close, engine = _open(path)
    out: dict[str, Any] = {
        "name": name,
        "path": str(path),
        "engine": engine,
        "window": window.to_dict(),
        "head": meta.get("head", "linear"),
        "training_config": meta.get("training_config"),
        "validation": meta.get("validation"),
        "self_training": meta.get("self_training"),
        "test": {},
    }
    try:
        for data_path in sets:
            data = read_word_labels(data_path)
            doc = Document(Path(data_path).name, list(data.words), list(data.labels))
            t0 = time.perf_counter()
            logits = decode_documents(infer, aligner, [doc], window)
            secs = time.perf_counter() - t0
            # argmax per word (as served), plus Viterbi over the document for CRF heads
            rec = score(model, [doc], logits).to_dict() | {"n_words": len(data), "decode_s": round(secs, 1)}
            out["test"][doc.name] = rec
            print(f"{name} {doc.name}: overall F1 {rec['overall_f1']:.2f} ({secs:.0f} s)", file=sys.stderr)
    finally:
        close()
    return out


def _f1(rec: dict | None, cls: str | None = None) -> str:
    if not rec:
        return ""
    if cls is None:
        return f"{rec['overall_f1']:.1f}"
    return f"{rec['per_class'][cls]['f1']:.1f}"


def markdown(results: Sequence[dict], sets: Sequence[str] = ("test2011", "test2011asr")) -> str:
    """A row per model: its training-time validation, overall F1 on each of ``sets`` (the data
    files' names, in the order given), then the first set's per-class F1 and, for CRF heads,
    the Viterbi F1 on each set."""
    first = sets[0]
    rows = [f"| model | dev2010 at training (its meta) | {' | '.join(sets)} | {first} COMMA / PERIOD / QUESTION F1 "
            f"| CRF Viterbi {' / '.join(sets)} |",
            "|---|---:|" + "---:|" * len(sets) + "---|---|"]
    for r in results:
        recs = [r["test"].get(name) for name in sets]
        ref = recs[0]
        per = " / ".join(_f1(ref, c) for c in ("COMMA", "PERIOD", "QUESTION")) if ref else ""
        vit = ""
        if ref and "viterbi" in ref:
            vit = " / ".join(_f1(rec.get("viterbi")) if rec else "" for rec in recs)
        val = r.get("validation") or {}
        rows.append(f"| {r['name']} | {val.get('overall_f1', float('nan')):.1f} | "
                    f"{' | '.join(_f1(rec) for rec in recs)} | {per} | {vit} |")
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ablation", description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", metavar="NAME=FOLDER")
    ap.add_argument("--data", type=Path, nargs="+", default=[REPO / s for s in DEFAULT_SETS],
                    help="labelled test files (default: test2011 and test2011asr)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = ap.parse_args(argv)
    if args.json:
        prepare_out_file(args.json.with_name(args.json.stem + ".json"), ap)  # where write_result puts it
    models = [_parse_model(m) for m in args.models]
    for d in args.data:
        if not d.is_file():
            raise InputError(f"no such data file: {d}")
    results = [score_model(name, path, args.data) for name, path in models]
    print(markdown(results, [Path(d).name for d in args.data]))
    if args.json:
        command = " ".join(["python -m benchmarks.ablation", *(argv if argv is not None else sys.argv[1:])])
        path = write_result(args.json.stem, {"models": results}, args.json.parent, command=command)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(run_module(main, "python -m benchmarks.ablation"))
