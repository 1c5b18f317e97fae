"""int8 vs fp32 ONNX Runtime: label agreement and validation F1 drop.

Runs ``model.onnx`` and ``model.int8.onnx`` of a model folder on the same
validation windows (a ``word<TAB>LABEL`` file read, tokenized and cut into
the offline decoder's double-overlap windows by the runtime) and reports the
word-level label agreement and micro F1 over the punctuation classes (COMMA,
PERIOD, QUESTION) for both. Target: F1 drop <= 0.5 points. Never use the
test sets here.

    python -m benchmarks.int8_accuracy MODEL_DIR --data .../dev2012 --skip-lines 40000
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import machine, prepare_out_file, run_module
from engines.build.parity import ParityWindows, compare_logits, run_windows
from engines.ort_engine import OrtEngine, OrtOptions
from streampunct.evaluation.scores import evaluate
from streampunct.labels import LABELS
from streampunct.model import load_model_info
from streampunct.text.word_labels import read_word_labels


def run_int8_accuracy(
    model_dir: str | Path,
    data_path: str | Path,
    *,
    skip_words: int = 0,
    max_words: int | None = 20000,
    fp32_artifact: str = "model.onnx",
    int8_artifact: str = "model.int8.onnx",
    threads: int | None = None,
    batch_size: int = 16,
    out_json: str | Path | None = None,
    print_report: bool = True,
) -> dict[str, Any]:
    """Agreement and F1 of the int8 artifact against the fp32 one on validation text."""
    model_dir = Path(model_dir)
    info = load_model_info(model_dir)
    data = read_word_labels(data_path)
    stop = None if max_words is None else skip_words + max_words
    words, gold = data.words[skip_words:stop], data.labels[skip_words:stop]
    windows = ParityWindows.of(info.aligner().offline_windows(words, info.window))
    rows, cols = windows.positions[:, 0], windows.positions[:, 1]
    labels = list(LABELS)
    options = OrtOptions(intra_op_threads=threads)
    report: dict[str, Any] = {
        "model_dir": str(model_dir), "data": str(data_path), "skip_words": skip_words,
        "words": len(words), "windows": len(windows),
    }
    logits = {}
    for name in (fp32_artifact, int8_artifact):
        engine = OrtEngine(model_dir / name, options)
        started = time.perf_counter()
        logits[name] = run_windows(engine.infer, windows, batch_size=batch_size)
        seconds = time.perf_counter() - started
        engine.close()
        scores = evaluate(gold, logits[name][rows, cols].argmax(-1)).to_dict()
        report[name] = {"f1": {**scores["per_class"], "overall": scores["overall"]}, "seconds": seconds}
    parity = compare_logits(
        logits[fp32_artifact], logits[int8_artifact], windows.attention_mask, windows.positions
    )
    report["label_agreement"] = parity.label_agreement
    report["max_abs_logit_diff"] = parity.max_abs_diff
    report["f1_drop"] = (
        report[fp32_artifact]["f1"]["overall"]["f1"] - report[int8_artifact]["f1"]["overall"]["f1"]
    )
    if print_report:
        print(f"{report['words']} words, {report['windows']} windows of {data_path}")
        print(f"{'':<24}" + "".join(f"{c:>10}" for c in [*labels[1:], "overall"]))
        for name in (fp32_artifact, int8_artifact):
            f1 = report[name]["f1"]
            print(f"{name:<24}" + "".join(f"{f1[c]['f1']:>10.2f}" for c in [*labels[1:], "overall"]))
        print(f"label agreement {int8_artifact} vs {fp32_artifact}: {100 * parity.label_agreement:.2f}%  "
              f"F1 drop: {report['f1_drop']:.2f} points (target <= 0.5)")
    report["machine"] = machine()
    if out_json is not None:
        from streampunct.text.textfile import write_text_atomically

        write_text_atomically(prepare_out_file(out_json), json.dumps(report, indent=2) + "\n")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    from streampunct.commands.argtypes import non_negative_int, positive_int

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--cased", action="store_true",
                        help="--data is cased, punctuated text (one paragraph a line), converted with "
                             "streampunct.text.convert (e.g. cased_spoken/ted_iwslt_dev2010_cased.txt)")
    parser.add_argument("--int8-artifact", default="model.int8.onnx",
                        help="artifact compared with model.onnx (also model.qdq.onnx, model.fp16.onnx)")
    parser.add_argument("--skip-lines", type=non_negative_int, default=0, help="words to skip (e.g. a training slice)")
    parser.add_argument("--max-words", type=positive_int, default=20000)
    parser.add_argument("--threads", type=positive_int, default=None)
    parser.add_argument("--out-json", type=Path, default=None)
    args = parser.parse_args(argv)
    if "test2011" in str(args.data):
        parser.error("the IWSLT test sets are for final evaluation only")
    if args.out_json is not None:
        prepare_out_file(args.out_json, parser)  # a wrong path fails now, not after both engines ran
    data = args.data
    if args.cased:
        data = cased_text_to_word_labels(args.data, Path(tempfile.mkdtemp()) / f"{args.data.stem}.tsv")
    run_int8_accuracy(args.model_dir, data, skip_words=args.skip_lines, max_words=args.max_words,
                      int8_artifact=args.int8_artifact, threads=args.threads, out_json=args.out_json)
    return 0


def cased_text_to_word_labels(source: Path, target: Path) -> Path:
    """Convert cased, punctuated text to a ``word<TAB>LABEL`` file (streampunct's rules)."""
    from streampunct.text.convert import text_to_word_labels

    lines = []
    for paragraph in source.read_text(encoding="utf-8").splitlines():
        words, labels = text_to_word_labels(paragraph)
        lines.extend(f"{w}\t{LABELS[label]}" for w, label in zip(words, labels, strict=True))
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


if __name__ == "__main__":
    raise SystemExit(run_module(main, "python -m benchmarks.int8_accuracy"))
