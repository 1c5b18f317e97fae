"""Scores of a training checkpoint on validation sets: offline, simulated streaming, and case.

    python -m training.checkpoint_report CKPT [--data dev2010 swda_val] [--right-context 0 1 2 4]
                                         [--json out.json]

Decodes with the torch model on the best device (CUDA when available), the
checkpoint's own window, and the runtime's decoders
(``streampunct.punctuator.decode_offline`` and the ``StreamState``
simulation of ``streampunct.evaluation``), so the figures are what the
service would give with this model. Test sets are refused, as everywhere in
training. With a case head, case is scored on sources that have case
(non-lower F1, accuracy, per-class F1).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from streampunct.labels import CASE_LABELS, LABELS, LOWER

log = logging.getLogger(__name__)


def case_report(gold: np.ndarray, pred: np.ndarray) -> dict:
    """Case scores over words with a known case class: accuracy, per-class P/R/F1 and the
    F1 of "not lower" (a word is right when it is non-lower in both gold and prediction)."""
    keep = gold >= 0
    g, p = gold[keep], pred[keep]
    out: dict = {"words": int(keep.sum()), "accuracy": round(100 * float((g == p).mean()), 2) if len(g) else 0.0}
    per = {}
    for k, name in enumerate(CASE_LABELS):
        tp = int(((g == k) & (p == k)).sum())
        prec = tp / max(int((p == k).sum()), 1)
        rec = tp / max(int((g == k).sum()), 1)
        per[name] = {"precision": round(100 * prec, 2), "recall": round(100 * rec, 2),
                     "f1": round(100 * (2 * prec * rec / (prec + rec) if prec + rec else 0.0), 2),
                     "support": int((g == k).sum())}
    out["per_class"] = per
    gn, pn = g != LOWER, p != LOWER
    tp = int((gn & pn).sum())
    prec, rec = tp / max(int(pn.sum()), 1), tp / max(int(gn.sum()), 1)
    out["non_lower"] = {"precision": round(100 * prec, 2), "recall": round(100 * rec, 2),
                        "f1": round(100 * (2 * prec * rec / (prec + rec) if prec + rec else 0.0), 2)}
    return out


def report(checkpoint: str | Path, sources: list[str], right_contexts: list[int], *, data_root_dir: str = "",
           cache_dir: str = "cache", device: str = "auto", max_words: int = 0) -> dict:
    import torch

    from streampunct.evaluation import streaming_labels
    from streampunct.metrics import evaluate
    from streampunct.windowing import WindowConfig
    from training.checkpoint import checkpoint_aligner, load_checkpoint
    from training.data import data_root, load_validation_docs, resolve_cache
    from training.evaluation import decode_documents
    from training.model import make_infer

    model, meta = load_checkpoint(checkpoint)
    dev = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    model.to(dev).eval()
    aligner = checkpoint_aligner(checkpoint, meta)
    window = WindowConfig(**{k: meta["window"][k] for k in ("size", "left", "right")})
    infer_all = make_infer(model, heads="all")
    infer = make_infer(model)
    root, cache = data_root(data_root_dir), resolve_cache(cache_dir)
    out: dict = {"checkpoint": str(checkpoint), "window": window.to_dict(), "sources": {}}
    for source in sources:
        t0 = time.perf_counter()
        docs = load_validation_docs(source, root, cache, max_words=max_words)
        logits = decode_documents(infer_all, aligner, docs, window, batch_size=64)
        gold = np.concatenate([np.asarray(d.labels) for d in docs])
        punct = np.concatenate([lg[:, : len(LABELS)] for lg in logits])
        entry: dict = {"words": int(len(gold)), "offline": evaluate(gold, punct.argmax(-1)).to_dict()}
        if logits and logits[0].shape[1] > len(LABELS) and any(d.case is not None for d in docs):
            case_gold = np.concatenate([np.asarray(d.case if d.case is not None else [-1] * len(d))
                                        for d in docs])
            case_pred = np.concatenate([lg[:, len(LABELS):].argmax(-1) for lg in logits])
            entry["case"] = case_report(np.where(case_gold < 0, -1, case_gold), case_pred)
        entry["streaming"] = {}
        for rc in right_contexts:
            pred = []
            for d in docs:
                pred.extend(streaming_labels(d.words, aligner, window, infer, right_context=rc).labels)
            entry["streaming"][str(rc)] = evaluate(gold, np.asarray(pred)).to_dict()
        entry["seconds"] = round(time.perf_counter() - t0, 1)
        out["sources"][source] = entry
        log.info("%s: offline %.2f, streaming %s", source, entry["offline"]["overall_f1"],
                 {k: v["overall_f1"] for k, v in entry["streaming"].items()})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.checkpoint_report", description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--data", nargs="+", default=["dev2010"])
    ap.add_argument("--right-context", nargs="*", type=int, default=[])
    ap.add_argument("--data-root", default="")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--max-words", type=int, default=0)
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from streampunct.errors import StreampunctError

    try:
        rep = report(args.checkpoint, args.data, args.right_context, data_root_dir=args.data_root,
                     device=args.device, max_words=args.max_words)
    except StreampunctError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(rep, indent=2)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(json.dumps({s: {"offline": e["offline"]["overall_f1"],
                          "streaming": {k: v["overall_f1"] for k, v in e["streaming"].items()},
                          **({"case_non_lower_f1": e["case"]["non_lower"]["f1"]} if "case" in e else {})}
                      for s, e in rep["sources"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
