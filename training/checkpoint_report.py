"""Scores of a training checkpoint on validation sets: offline, simulated streaming, and case.

    python -m training.checkpoint_report CKPT [--data dev2010 swda_val] [--right-context 0 1 2 4]
                                         [--stream-data dev2010] [--live] [--json out.json]

Decodes with the torch model on the best device (CUDA when available), the
checkpoint's own window, and the runtime's decoders
(``streampunct.core.decoder.decode_offline`` and the ``StreamState``
simulation of ``streampunct.evaluation.accuracy``), so the figures are what the
service would give with this model. Test sets are refused, as everywhere in
training. With a case head, case is scored on sources that have case
(``streampunct.evaluation.case``: the learned head as ``render`` uses it, and the
rules alone on the same punctuation).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from streampunct.evaluation.case import case_report, rule_cases
from streampunct.labels import LABELS, case_classes

log = logging.getLogger(__name__)


def report(checkpoint: str | Path, sources: list[str], right_contexts: list[int], *, data_root_dir: str = "",
           cache_dir: str = "cache", device: str = "auto", max_words: int = 0, batch_size: int = 32,
           stream_sources: list[str] | None = None, live: bool = False) -> dict:
    """Scores on ``sources``; streaming at ``right_contexts`` on ``stream_sources`` (default: all);
    with ``live``, a live stream with the server's defaults on the same sources
    (``streampunct.evaluation.accuracy.live_schedule``: what ``evaluate --live`` scores)."""
    import torch

    from streampunct.core.options import SessionOptions
    from streampunct.core.windowing import WindowConfig
    from streampunct.evaluation.accuracy import live_schedule, schedule_labels, streaming_runs
    from streampunct.evaluation.scores import evaluate
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
            labels = [lg[:, : len(LABELS)].argmax(-1).tolist() for lg in logits]
            margin = float(meta.get("case_margin") or 0.0)  # as the runtime serves this folder
            learned = np.concatenate([rule_cases(d.words, lab, case_classes(lg[:, len(LABELS):], margin).tolist())
                                      for d, lab, lg in zip(docs, labels, logits, strict=True)])
            rules = np.concatenate([rule_cases(d.words, lab) for d, lab in zip(docs, labels, strict=True)])
            gold_case = np.where(case_gold < 0, -1, case_gold)
            entry["case"] = case_report(gold_case, learned)
            entry["case_rules"] = case_report(gold_case, rules)
        entry["streaming"] = {}
        streams = stream_sources is None or source in stream_sources
        if right_contexts and streams:
            # torch fp32 rows are independent, so batching the simulation's windows is exact
            # (up to float rounding); see streampunct.evaluation.accuracy.streaming_runs.
            preds: dict[int, list[int]] = {rc: [] for rc in right_contexts}
            for d in docs:
                runs = streaming_runs(d.words, aligner, window, infer, right_contexts, batch_size=batch_size,
                                      progress=True)
                for rc in right_contexts:
                    preds[rc].extend(runs[rc].labels)
            for rc in right_contexts:
                entry["streaming"][str(rc)] = evaluate(gold, np.asarray(preds[rc])).to_dict()
        if live and streams:
            options = SessionOptions()
            labels = [x for d in docs for x in schedule_labels(live_schedule(d.words), aligner, window, infer, options)]
            entry["live"] = evaluate(gold, np.asarray(labels)).to_dict() | {
                "right_context": options.right_context, "max_delay_ms": options.max_delay_ms}
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
    ap.add_argument("--stream-data", nargs="*", default=None,
                    help="simulate streaming on these sources only (default: every --data source); "
                         "the simulation runs one window per word and right context, the costly part")
    ap.add_argument("--live", action="store_true",
                    help="also score a live stream (1-4-word chunks at 2.5 words/s, the server's default "
                         "options) on the --stream-data sources")
    ap.add_argument("--data-root", default="")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--max-words", type=int, default=0)
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args(argv)
    if any(rc < 0 for rc in args.right_context):
        ap.error(f"--right-context takes words of right context, 0 or more, not {min(args.right_context)}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    from streampunct.errors import StreampunctError
    from training.cli_support import check_writable

    try:
        if args.json:
            check_writable(args.json, "--json")  # now, not after the report is made
        rep = report(args.checkpoint, args.data, args.right_context, data_root_dir=args.data_root,
                     device=args.device, max_words=args.max_words, stream_sources=args.stream_data, live=args.live)
    except StreampunctError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(rep, indent=2)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    print(json.dumps({s: {"offline": e["offline"]["overall_f1"],
                          "streaming": {k: v["overall_f1"] for k, v in e["streaming"].items()},
                          **({"live": e["live"]["overall_f1"]} if "live" in e else {}),
                          **({"case_non_lower_f1": e["case"]["non_lower"]["f1"]} if "case" in e else {})}
                      for s, e in rep["sources"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
