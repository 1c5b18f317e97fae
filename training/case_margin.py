"""Tune a model folder's case margin on validation text (a release step).

    python -m training.case_margin MODEL_DIR --data FILE [FILE ...] [--margins 0 0.5 1 ...]
                                   [--decode offline|live] [--write] [--json F]

The truecasing head learned sentence-initial capitals along with names, so
after a period the model missed it capitalizes the next word ("is there
anything else Alright then"). The runtime takes case classes with a margin
(:func:`streampunct.labels.case_classes`): CAPITALIZED becomes lower where its
logit beats lower's by less than ``case_margin``; sentence starts stay
capitalized by the rendering rule. This tool picks that margin.

Each ``--data`` file is cased, punctuated validation text (e.g.
``../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt`` and
``swda_val_cased.txt``; test sets are refused). It is decoded once, offline, as
``punctuate`` decodes a text (the last word ends a sentence), or with
``--decode live`` as one live stream with the server's default session options
(:func:`streampunct.evaluation.accuracy.live_schedule`, what ``evaluate --live`` plays;
cached left context as ``--stream-cache auto``); every margin of the grid is
then applied to the same logits. Each margin is scored per file
by :func:`streampunct.evaluation.case.mid_sentence_report` (F1 of "not lowercase"
over the words shown mid-sentence, where the gold counts names and acronyms
only: a capital after a missed period is a false positive), with the
sentence-start capitals left mid-sentence per 1000 words and the overall
non-lower F1 (:func:`streampunct.evaluation.case.case_report`, what
``streampunct.evaluation.case`` reports as ``learned``).

The rule (:func:`choose_margin`): the highest mean mid-sentence F1 over the
files (to 0.01); ties go to the smaller margin. ``--write`` stores it in the
folder's ``streampunct.json`` as ``case_margin``, with the grid under
``case_margin_tuning`` (per set: mid-sentence F1, sentence-start capitals per
1000 words, non-lower F1); only the metadata changes.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import ArtifactError
from engines.model_meta import update_model_meta
from streampunct.errors import InputError, StreampunctError
from streampunct.evaluation.case import case_report, mid_sentence_report, rule_cases
from streampunct.labels import CASE_LABELS, LABELS, case_classes, check_case_margin

#: The margins tried by default (logit differences).
DEFAULT_MARGINS: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
_DECODE_NOTES = {
    "offline": "offline, the folder's window and artifact (as punctuate)",
    "live": "one live stream: 1-4-word chunks at 2.5 words/s, the server's default session options, "
            "--stream-cache auto",
}
#: The figures of each set kept in the folder's ``case_margin_tuning`` (``--json`` has them all).
RECORDED = ("mid_sentence_f1", "sentence_start_capitals_per_1000", "non_lower_f1")
RULE = ("the highest mean mid-sentence non-lower F1 over the sets (to 0.01); ties: the smaller margin")


@dataclass(frozen=True)
class DecodedText:
    """One validation text, decoded once.

    Attributes:
        name: the set's name (its file's stem).
        words: normalized words.
        labels: the model's punctuation (the last word ends a sentence).
        case_logits: float32[n_words, 4] of the truecasing head.
        gold_labels, gold_cases: the text's own punctuation and case classes.
    """

    name: str
    words: list[str]
    labels: list[int]
    case_logits: np.ndarray
    gold_labels: list[int]
    gold_cases: list[int]


#: How a text is decoded: ``offline`` as ``punctuate``, ``live`` as one live stream.
DECODES: tuple[str, ...] = ("offline", "live")


def decode_text(punctuator, name: str, text: str, *, decode: str = "offline",
                progress: bool = False) -> DecodedText:
    """Decode cased, punctuated ``text`` once with ``punctuator``
    (:class:`streampunct.core.decoder.OfflineDecoder` of a model with a truecasing head)."""
    from streampunct.core.decoder import labels_from_logits
    from streampunct.text.convert import text_to_word_labels_cased

    if decode not in DECODES:
        raise InputError(f"decode must be one of {', '.join(DECODES)}, not {decode!r}")
    if not punctuator.has_case:
        raise InputError("the model has no truecasing head: there is no case margin to tune")
    words, gold_labels, gold_cases = text_to_word_labels_cased(text)
    if not words:
        raise InputError(f"{name}: no words")
    n = len(LABELS)
    if decode == "offline":
        out = punctuator.head_logits(words, progress=progress)
        labels = labels_from_logits(out[:, :n], True)
    else:
        from streampunct.core.options import SessionOptions
        from streampunct.evaluation.accuracy import live_schedule, schedule_rows

        labels, out = schedule_rows(live_schedule(words), punctuator.aligner, punctuator.stream_window,
                                    punctuator.infer_all, SessionOptions(),
                                    stream_engine=punctuator.stream_engine("auto"))
    if out.shape[1] < n + len(CASE_LABELS):
        raise InputError("the engine returned no case logits")
    return DecodedText(name, words, labels, np.asarray(out[:, n : n + len(CASE_LABELS)], dtype=np.float32),
                       gold_labels, gold_cases)


def score_margin(text: DecodedText, margin: float) -> dict[str, Any]:
    """The figures of one margin on one decoded text."""
    shown = rule_cases(text.words, text.labels, case_classes(text.case_logits, margin).tolist())
    mid = mid_sentence_report(text.words, text.labels, shown, text.gold_labels, text.gold_cases)
    return {"mid_sentence_f1": mid["non_lower"]["f1"], "mid_sentence": mid["non_lower"],
            "sentence_start_capitals_per_1000": mid["sentence_start_capitals"],
            "other_false_capitals_per_1000": mid["other_false_capitals"],
            "non_lower_f1": case_report(text.gold_cases, shown)["non_lower"]["f1"]}


def sweep(texts: Sequence[DecodedText], margins: Sequence[float]) -> list[dict[str, Any]]:
    """One grid row per margin: each set's figures and the mean mid-sentence F1."""
    if not texts:
        raise ValueError("no validation texts")
    rows = []
    for margin in dict.fromkeys(check_case_margin(m) for m in margins):
        sets = {t.name: score_margin(t, margin) for t in texts}
        mean = sum(s["mid_sentence_f1"] for s in sets.values()) / len(sets)
        rows.append({"margin": margin, "mean_mid_sentence_f1": round(mean, 2), "sets": sets})
    return rows


def choose_margin(grid: Sequence[dict[str, Any]]) -> float:
    """The margin of :data:`RULE`."""
    if not grid:
        raise ValueError("empty margin grid")
    best = max(round(row["mean_mid_sentence_f1"], 2) for row in grid)
    return min(row["margin"] for row in grid if round(row["mean_mid_sentence_f1"], 2) == best)


def tune(model_dir: str | Path, data: Sequence[str | Path], margins: Sequence[float] = DEFAULT_MARGINS,
         *, decode: str = "offline", write: bool = False, progress: bool = False) -> dict[str, Any]:
    """Decode each file once, sweep ``margins``, choose one; with ``write`` store it in the folder."""
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.text.textfile import read_text
    from training.data import is_test_set

    for path in data:
        if is_test_set(path):
            raise InputError(f"{Path(path).name} is a test set: never tune on it")
    p = OfflineDecoder.from_model_dir(model_dir)
    try:
        texts = [decode_text(p, Path(path).stem, read_text(str(path)), decode=decode, progress=progress)
                 for path in data]
    finally:
        p.close()
    grid = sweep(texts, margins)
    chosen = choose_margin(grid)
    result = {"model": str(model_dir), "set": ", ".join(Path(d).name for d in data),
              "decode": _DECODE_NOTES[decode],
              "words": {t.name: len(t.words) for t in texts}, "rule": RULE, "grid": grid, "chosen": chosen}
    if write:
        record = {k: result[k] for k in ("set", "decode", "rule", "chosen")}
        record["grid"] = [{"margin": row["margin"], "mean_mid_sentence_f1": row["mean_mid_sentence_f1"],
                           "sets": {name: {k: v for k, v in figures.items() if k in RECORDED}
                                    for name, figures in row["sets"].items()}} for row in grid]
        try:
            update_model_meta(model_dir, case_margin=chosen, case_margin_tuning=record)
        except ArtifactError as e:
            raise InputError(str(e)) from None
    return result


def format_grid(result: dict[str, Any]) -> str:
    """The grid as a text table: per set mid-sentence F1, sentence-start capitals per 1000
    words and non-lower F1; the chosen margin marked."""
    names = list(result["grid"][0]["sets"])
    head = ["margin", "mean mid F1"] + [f"{n}: {c}" for n in names for c in ("mid F1", "starts/1k", "non-lower F1")]
    lines = ["  ".join(head)]
    for row in result["grid"]:
        cells = [f"{row['margin']:g}", f"{row['mean_mid_sentence_f1']:.2f}"]
        for n in names:
            s = row["sets"][n]
            cells += [f"{s['mid_sentence_f1']:.2f}", f"{s['sentence_start_capitals_per_1000']:.2f}",
                      f"{s['non_lower_f1']:.2f}"]
        lines.append("  ".join(cells) + ("   <- chosen" if row["margin"] == result["chosen"] else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.case_margin", description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", type=Path, help="model folder with a truecasing head")
    ap.add_argument("--data", nargs="+", required=True, help="cased, punctuated validation text(s)")
    ap.add_argument("--margins", nargs="+", type=float, default=list(DEFAULT_MARGINS), metavar="M",
                    help="margins to try (default: %(default)s)")
    ap.add_argument("--decode", choices=DECODES, default="offline",
                    help="decode each text offline (as punctuate; the default) or as one live stream")
    ap.add_argument("--write", action="store_true",
                    help="write case_margin and case_margin_tuning into the folder's streampunct.json")
    ap.add_argument("--json", type=Path, help="also write the whole result here")
    args = ap.parse_args(argv)
    try:
        result = tune(args.model_dir, args.data, args.margins, decode=args.decode, write=args.write,
                      progress=True)
    except (StreampunctError, ValueError) as e:
        print(f"case_margin: error: {e}", file=sys.stderr)
        return 2
    print(format_grid(result))
    print(f"chosen case_margin {result['chosen']:g} ({RULE})"
          + (f"; written to {args.model_dir / 'streampunct.json'}" if args.write else ""))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
