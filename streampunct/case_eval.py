"""Truecasing accuracy of a model folder on cased, punctuated text.

    python -m streampunct.case_eval --data data/iwslt2011/test2011_cased.txt [--model DIR] [--json F]

The text is converted as training text is (``streampunct.convert``): each
word's gold case class (lower / Capitalized / ALL CAPS / MiXed) comes from its
written form. The model punctuates the lowercased words; case is then scored
three ways: ``rules`` (sentence starts after the model's periods and question
marks, and "I": what ``capitalize`` renders without a case head),
``rules_on_gold_punctuation`` (the same rules given the true punctuation: the
best the rules can do) and ``learned`` (the model's truecasing head combined
with the rules as ``render`` combines them; only for models with one).
Figures: accuracy, per-class P/R/F1, and F1 of "not lowercase".
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from streampunct.labels import CAPITALIZED, CASE_LABELS, LOWER, MIXED, PERIOD, QUESTION


def case_report(gold: Sequence[int], pred: Sequence[int]) -> dict:
    """Accuracy, per-class P/R/F1 and non-lower P/R/F1 (percent) over words with a gold class
    (negative gold = unknown, skipped)."""
    g_all, p_all = np.asarray(gold), np.asarray(pred)
    keep = g_all >= 0
    g, p = g_all[keep], p_all[keep]

    def prf(tp: int, n_pred: int, n_gold: int) -> dict:
        prec, rec = tp / max(n_pred, 1), tp / max(n_gold, 1)
        f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
        return {"precision": round(100 * prec, 2), "recall": round(100 * rec, 2), "f1": round(100 * f1, 2)}

    per = {name: {**prf(int(((g == k) & (p == k)).sum()), int((p == k).sum()), int((g == k).sum())),
                  "support": int((g == k).sum())} for k, name in enumerate(CASE_LABELS)}
    gn, pn = g != LOWER, p != LOWER
    return {"words": int(len(g)), "accuracy": round(100 * float((g == p).mean()), 2) if len(g) else 0.0,
            "non_lower": prf(int((gn & pn).sum()), int(pn.sum()), int(gn.sum())), "per_class": per}


def rule_cases(words: Sequence[str], labels: Sequence[int], cases: Sequence[int] | None = None,
               *, sentence_start: bool = True) -> list[int]:
    """The case class ``render(..., capitalize=True, cases=cases)`` gives each word."""
    out = []
    start = sentence_start
    for k, (w, label) in enumerate(zip(words, labels, strict=True)):
        if cases is not None and cases[k] != LOWER:
            out.append(CAPITALIZED if cases[k] == MIXED else int(cases[k]))
        elif start or w == "i" or w.startswith("i'"):
            out.append(CAPITALIZED)
        else:
            out.append(LOWER)
        start = label in (PERIOD, QUESTION)
    return out


def evaluate_case(punctuator, text: str) -> dict:
    from streampunct.convert import text_to_word_labels_cased

    words, gold_labels, gold_cases = text_to_word_labels_cased(text)
    labels, cases = punctuator.labels_and_cases(words)
    out = {"words": len(words), "has_case_head": cases is not None,
           "rules": case_report(gold_cases, rule_cases(words, labels)),
           "rules_on_gold_punctuation": case_report(gold_cases, rule_cases(words, gold_labels))}
    if cases is not None:
        out["learned"] = case_report(gold_cases, rule_cases(words, labels, cases))
    return out


def main(argv: list[str] | None = None) -> int:
    from streampunct.errors import StreampunctError
    from streampunct.punctuator import Punctuator
    from streampunct.textfile import read_text

    ap = argparse.ArgumentParser(prog="python -m streampunct.case_eval", description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="cased, punctuated text")
    ap.add_argument("--model", type=Path, default=None, help="model folder (default: the shipped model)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        p = Punctuator.from_model_dir(args.model)
        try:
            rep = {"model": str(p.info.path if p.info else args.model), "data": str(args.data),
                   **evaluate_case(p, read_text(str(args.data)))}
        finally:
            p.close()
    except StreampunctError as e:
        print(f"case_eval: error: {e}", file=sys.stderr)
        return 2
    text = json.dumps(rep, indent=2)
    if args.json:
        args.json.write_text(text + "\n", encoding="utf-8")
    summary = {k: rep[k]["non_lower"]["f1"] for k in ("rules", "rules_on_gold_punctuation", "learned") if k in rep}
    print(f"non-lower F1 on {args.data} ({rep['words']} words): {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
