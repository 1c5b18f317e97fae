"""The case head after a filler, on validation (docs/training.md, "Noise").

    python scripts/probe_filler_case.py [MODEL_DIR ...] [--data CASED_TEXT] [--json OUT]

For each model folder (default: the shipped model), the cased text is punctuated and truecased
offline as ``streampunct.case_eval`` does it ('learned' cases), and the words right after a
filler that the gold text sets off with a comma (``uh,`` ``um,`` ...) are scored apart from the
rest: how often the model writes a capital where the text has none. Noise augmentation before
2026-11-26 taught every model trained with it that the word after a filler that opens a sentence
keeps its capital ("milk. um, Then"). Validation only (default: SwDA validation, fillers kept).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from streampunct.case_eval import rule_cases
from streampunct.convert import text_to_word_labels_cased
from streampunct.labels import COMMA, LOWER, PERIOD, QUESTION
from streampunct.punctuator import Punctuator
from streampunct.textfile import read_text

FILLERS = {"uh", "um", "well", "so", "like", "oh"}


def after_filler_report(words, gold_labels, gold_cases, cases) -> dict:
    groups = {"after_filler": [], "after_opening_filler": [], "elsewhere": []}
    for k in range(1, len(words)):
        filler = words[k - 1] in FILLERS and gold_labels[k - 1] == COMMA
        groups["after_filler" if filler else "elsewhere"].append(k)
        if filler and (k < 2 or gold_labels[k - 2] in (PERIOD, QUESTION)):  # "... . Um, do you"
            groups["after_opening_filler"].append(k)
    out = {}
    for name, ks in groups.items():
        lower = [k for k in ks if gold_cases[k] == LOWER]
        false_caps = sum(cases[k] != LOWER for k in lower)
        out[name] = {"words": len(ks), "gold_lower": len(lower), "false_capitals": false_caps,
                     "false_capital_rate": round(100 * false_caps / max(len(lower), 1), 2)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="*", default=[None])
    ap.add_argument("--data", default="../shared/data/cased_spoken/swda_val_cased.txt")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    words, gold_labels, gold_cases = text_to_word_labels_cased(read_text(args.data))
    report = {"data": args.data, "models": {}}
    for m in args.models:
        p = Punctuator.from_model_dir(m)
        try:
            labels, cases = p.labels_and_cases(words)
        finally:
            p.close()
        r = after_filler_report(words, gold_labels, gold_cases, rule_cases(words, labels, cases))
        report["models"][str(m or "models/default")] = r
        print(f"{m or 'models/default'}: false capitals after a filler + comma "
              f"{r['after_filler']['false_capitals']} of {r['after_filler']['gold_lower']} lowercase words "
              f"({r['after_filler']['false_capital_rate']}%; after a filler that opens a sentence "
              f"{r['after_opening_filler']['false_capitals']} of {r['after_opening_filler']['gold_lower']}, "
              f"{r['after_opening_filler']['false_capital_rate']}%), elsewhere {r['elsewhere']['false_capital_rate']}%")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
