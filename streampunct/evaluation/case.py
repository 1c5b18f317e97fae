"""Truecasing accuracy of a model folder on cased, punctuated text.

    python -m streampunct.evaluation.case --data data/iwslt2011/test2011_cased.txt [--model DIR] [--json F]

The text is converted as training text is (``streampunct.text.convert``): each
word's gold case class (lower / Capitalized / ALL CAPS / MiXed) comes from its
written form. The model punctuates the lowercased words; case is then scored
three ways: ``rules`` (sentence starts after the model's periods and question
marks, and "I": what ``capitalize`` renders without a case head),
``rules_on_gold_punctuation`` (the same rules given the true punctuation: the
best the rules can do) and ``learned`` (the model's truecasing head combined
with the rules as ``render`` combines them; only for models with one).
Figures: accuracy, per-class P/R/F1, and F1 of "not lowercase"; for the
learned head also ``learned_mid_sentence`` (:func:`mid_sentence_report`: names
and acronyms among the words shown mid-sentence, and the capitals left there
by periods the model missed). The head's classes are taken with the model
folder's ``case_margin`` (:func:`streampunct.labels.case_classes`).
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
    (negative gold = unknown, skipped). A ratio with nothing to count (no word predicted or
    gold in a class) is 0. Raises ValueError when ``gold`` and ``pred`` differ in length."""
    g_all, p_all = np.asarray(gold), np.asarray(pred)
    if g_all.shape != p_all.shape:
        raise ValueError(f"lengths differ: {g_all.size} gold case classes, {p_all.size} predicted")
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
        elif start or _is_i(w):
            out.append(CAPITALIZED)
        else:
            out.append(LOWER)
        start = label in (PERIOD, QUESTION)
    return out


def _is_i(word: str) -> bool:
    """The pronoun "I" (and "I'm", "I'll", ...): capitalized by rule wherever it stands."""
    return word == "i" or word.startswith("i'")


def mid_sentence_report(words: Sequence[str], labels: Sequence[int], shown: Sequence[int],
                        gold_labels: Sequence[int], gold_cases: Sequence[int]) -> dict:
    """Names and acronyms among the words shown in the middle of a sentence.

    A word is shown mid-sentence when the word before it has no sentence mark
    (``labels``: the model's; not PERIOD or QUESTION). There the rendered text
    should capitalize names and acronyms only: the gold is "not lowercase" when
    the written word is not lowercase and does not open a sentence of the gold
    text (the word before it has no gold sentence mark), the prediction when
    ``shown`` (the class :func:`rule_cases` renders) is not lowercase. So a
    capital after a period the model missed is a false positive. Words with an
    unknown gold class (negative) are skipped, and so is the pronoun "I"
    (capitalized by rule everywhere, rightly).

    Returns ``words`` (all words with a gold class), ``mid_sentence`` (words
    shown mid-sentence), ``non_lower`` (P/R/F1, percent) and, per 1000 words,
    ``sentence_start_capitals`` (capitals shown mid-sentence on words that open
    a gold sentence: the missed periods' capitals) and ``other_false_capitals``
    (capitals shown mid-sentence on words the gold writes lowercase).
    """
    n = len(labels)
    if not (len(words) == len(shown) == len(gold_labels) == len(gold_cases) == n):
        raise ValueError(f"lengths differ: {len(words)} words, {n} labels, {len(shown)} shown, "
                         f"{len(gold_labels)} gold labels, {len(gold_cases)} gold cases")
    ends = (PERIOD, QUESTION)
    g_case = np.asarray(gold_cases)
    known = g_case >= 0
    mid = np.zeros(n, dtype=bool)
    gold_start = np.ones(n, dtype=bool)
    if n:
        mid[1:] = ~np.isin(np.asarray(labels)[:-1], ends)
        gold_start[1:] = np.isin(np.asarray(gold_labels)[:-1], ends)
    mid &= known & ~np.asarray([_is_i(w) for w in words], dtype=bool).reshape(n)
    capital = np.asarray(shown) != LOWER
    gold_name = (g_case != LOWER) & ~gold_start
    tp = int((mid & capital & gold_name).sum())
    n_pred, n_gold = int((mid & capital).sum()), int((mid & gold_name).sum())
    prec, rec = tp / max(n_pred, 1), tp / max(n_gold, 1)
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    words = int(known.sum())
    per_1000 = 1000 / max(words, 1)
    return {"words": words, "mid_sentence": int(mid.sum()),
            "non_lower": {"precision": round(100 * prec, 2), "recall": round(100 * rec, 2),
                          "f1": round(100 * f1, 2)},
            "sentence_start_capitals": round(per_1000 * int((mid & capital & (g_case != LOWER) & gold_start).sum()), 2),
            "other_false_capitals": round(per_1000 * int((mid & capital & (g_case == LOWER)).sum()), 2)}


def evaluate_case(punctuator, text: str) -> dict:
    from streampunct.text.convert import text_to_word_labels_cased

    words, gold_labels, gold_cases = text_to_word_labels_cased(text)
    labels, cases = punctuator.labels_and_cases(words)
    out = {"words": len(words), "has_case_head": cases is not None,
           "rules": case_report(gold_cases, rule_cases(words, labels)),
           "rules_on_gold_punctuation": case_report(gold_cases, rule_cases(words, gold_labels))}
    if cases is not None:
        shown = rule_cases(words, labels, cases)
        out["learned"] = case_report(gold_cases, shown)
        out["learned_mid_sentence"] = mid_sentence_report(words, labels, shown, gold_labels, gold_cases)
    return out


def main(argv: list[str] | None = None) -> int:
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.errors import InputError, StreampunctError
    from streampunct.model import model_folder_argument
    from streampunct.text.textfile import output_file, read_text

    ap = argparse.ArgumentParser(prog="python -m streampunct.evaluation.case", description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="cased, punctuated text")
    ap.add_argument("--model", type=model_folder_argument, default=None, help="model folder (default: the shipped model)")
    ap.add_argument("--json", type=Path, default=None, help="write the report here (missing folders are made)")
    args = ap.parse_args(argv)
    try:
        out = output_file(args.json, option="--json") if args.json else None  # a bad --json fails before the run
    except InputError as e:  # no folder, a file in the way, no permission
        ap.error(str(e))
    except OSError as e:  # a folder at --json
        ap.error(f"cannot write --json {args.json}: {e.strerror or e}")
    try:
        text = read_text(str(args.data))
        if not text.split():
            raise InputError(f"{args.data} holds no words")
        from streampunct.text.word_labels import split_labeled_line

        first = next((line for line in text.splitlines() if line.strip()), "")
        if split_labeled_line(first) is not None:
            raise InputError(f"{args.data} holds word<TAB>LABEL lines (no case to score); the case score "
                             "reads cased, punctuated text, e.g. data/iwslt2011/test2011_cased.txt")
        p = OfflineDecoder.from_model_dir(args.model)
        try:
            rep = {"model": str(p.info.path if p.info else args.model), "data": str(args.data),
                   **evaluate_case(p, text)}
        finally:
            p.close()
    except StreampunctError as e:
        if out is not None:
            out.discard()
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    if out is not None:
        out.file.write(json.dumps(rep, indent=2) + "\n")
        out.commit()
    summary = {k: rep[k]["non_lower"]["f1"] for k in ("rules", "rules_on_gold_punctuation", "learned") if k in rep}
    print(f"non-lower F1 on {args.data} ({rep['words']} words): {summary}")
    if "learned_mid_sentence" in rep:
        mid = rep["learned_mid_sentence"]
        print(f"learned, mid-sentence: non-lower F1 {mid['non_lower']['f1']}, sentence-start capitals "
              f"{mid['sentence_start_capitals']} per 1000 words")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
