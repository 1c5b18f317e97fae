"""``streampunct build-engine``: a training checkpoint -> a runtime model folder.

Loads the checkpoint with ``training.checkpoint.load_checkpoint``, exports
ONNX, derives the artifact for the chosen backend and precision, measures
parity against torch on validation text, and writes the model folder (see
``engines.builder`` and docs/engines.md).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from streampunct.errors import DependencyError, InputError, ModelError

NAME = "build-engine"
HELP = "export a trained checkpoint to ONNX Runtime (fp32/int8) or TensorRT (fp16/int8), with parity figures"

_DEFAULT_WINDOW = {"size": 126, "left": 40, "right": 20}
#: Words per 128-token window on TED text is about 100; calibration reads this many lines per window.
_LINES_PER_WINDOW = 110


def default_parity_data() -> Path:
    """IWSLT dev2012 under $STREAMPUNCT_DATA or ../shared/data (never a test set)."""
    root = os.environ.get("STREAMPUNCT_DATA")
    base = Path(root) if root else Path(__file__).resolve().parents[2].parent / "shared" / "data"
    return base / "iwslt2011_che" / "dev2012"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, type=Path, metavar="CKPT",
                        help="training checkpoint folder (encoder + head.safetensors + streampunct.json)")
    parser.add_argument("--backend", choices=("onnxruntime", "tensorrt"), default="onnxruntime",
                        help="target runtime (default: onnxruntime)")
    parser.add_argument("--precision", choices=("fp32", "fp16", "int8"), default=None,
                        help="default: int8 for onnxruntime, fp16 for tensorrt")
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="model folder to write (e.g. models/default)")
    parser.add_argument("--max-batch", type=int, default=32, help="TensorRT profile max batch (default 32)")
    parser.add_argument("--max-len", type=int, default=256,
                        help="TensorRT profile max sequence length in tokens (default 256)")
    parser.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    parser.add_argument("--parity-data", type=Path, default=None, metavar="PATH",
                        help="word<TAB>LABEL validation file (default: iwslt2011_che/dev2012)")
    parser.add_argument("--parity-lines", type=int, default=2000,
                        help="lines of the validation file used for parity (default 2000)")
    parser.add_argument("--calibration-windows", type=int, default=64,
                        help="128-token windows (read after the parity lines) for fp16/int8 "
                             "calibration (default 64)")
    parser.add_argument("--timing-cache", type=Path, default=None,
                        help="TensorRT timing cache file (read and updated)")
    parser.add_argument("--workspace-gb", type=float, default=4.0,
                        help="TensorRT builder workspace in GiB (default 4)")
    parser.add_argument("--no-per-channel", action="store_true",
                        help="per-tensor instead of per-channel int8 weight scales (onnxruntime)")
    parser.add_argument("--full-range", action="store_true",
                        help="onnxruntime int8: 8-bit instead of 7-bit weights (labels then differ "
                             "between x86 CPUs with and without VNNI)")
    parser.add_argument("--quantize-embeddings", action="store_true",
                        help="onnxruntime int8: also store the embedding tables as int8 (smaller file)")


def _checkpoint_metadata(ckpt: Path, loaded: dict | None) -> tuple[dict, dict]:
    """labels / label_position / window from the loader, else the checkpoint's streampunct.json."""
    from streampunct.labels import LABELS

    on_disk: dict = {}
    path = ckpt / "streampunct.json"
    if path.is_file():
        try:
            on_disk = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise ModelError(f"cannot read {path}: {e}") from e
    merged = {**on_disk, **(loaded or {})}
    return {
        "labels": list(merged.get("labels") or LABELS),
        "label_position": merged.get("label_position") or "last",
        "window": merged.get("window") or _DEFAULT_WINDOW,
    }, on_disk


def run(args: argparse.Namespace) -> int:
    from engines.base import DependencyMissing, EngineError

    try:
        return _run(args)
    except DependencyMissing as e:
        raise DependencyError(str(e)) from e
    except EngineError as e:
        raise ModelError(str(e)) from e


def _run(args: argparse.Namespace) -> int:
    from engines.builder import BuildConfig, build_model_folder
    from engines.parity import encode_windows, load_tokenizer, read_word_labels
    from engines.sidecar import sha256_files
    from engines.tensorrt_build import TrtBuildOptions

    ckpt: Path = args.model
    if not ckpt.is_dir():
        raise InputError(f"--model {ckpt} is not a checkpoint folder")
    tokenizer_path = ckpt / "tokenizer.json"
    if not tokenizer_path.is_file():
        raise InputError(f"{ckpt} has no tokenizer.json (a Hugging Face fast tokenizer)")
    parity_path: Path = args.parity_data or default_parity_data()
    if "test2011" in parity_path.name:
        raise InputError("the IWSLT test sets are for final evaluation only: pass a validation file")
    if not parity_path.is_file():
        raise InputError(f"no validation data at {parity_path}; pass --parity-data word<TAB>LABEL file")
    precision = args.precision or ("int8" if args.backend == "onnxruntime" else "fp16")

    try:
        from training.checkpoint import load_checkpoint
    except ImportError as e:
        raise DependencyError(
            f"build-engine loads checkpoints with the training package ({e}); "
            "install with: pip install 'streampunct[train]'"
        ) from e
    module, loaded_meta = load_checkpoint(ckpt)
    metadata, on_disk = _checkpoint_metadata(ckpt, loaded_meta)
    files = [p for p in ckpt.rglob("*") if p.is_file()]
    metadata["source_sha256"] = sha256_files(files, ckpt)

    tokenizer = load_tokenizer(tokenizer_path)
    cal_lines = args.calibration_windows * _LINES_PER_WINDOW
    data = read_word_labels(parity_path, metadata["labels"], max_lines=args.parity_lines + cal_lines)
    n_parity = min(len(data.words), args.parity_lines)
    parity_data = type(data)(data.words[:n_parity], data.labels[:n_parity], data.source)
    parity = encode_windows(tokenizer, parity_data, label_position=metadata["label_position"])
    calibration = None
    if len(data.words) > n_parity:
        cal_data = type(data)(data.words[n_parity:], data.labels[n_parity:], data.source)
        calibration = encode_windows(tokenizer, cal_data, label_position=metadata["label_position"])
        calibration = calibration.head(args.calibration_windows)
    elif precision != "fp32" and (args.backend == "tensorrt" or precision == "fp16"):
        calibration = parity  # short validation file: calibrate on the parity windows

    config = BuildConfig(
        backend=args.backend,
        precision=precision,
        opset=args.opset,
        per_channel=not args.no_per_channel,
        reduce_range=not args.full_range,
        quantize_embeddings=args.quantize_embeddings,
        trt=TrtBuildOptions(
            max_batch=args.max_batch,
            max_len=args.max_len,
            workspace_bytes=int(args.workspace_gb * (1 << 30)),
            timing_cache=args.timing_cache,
        ),
    )
    report = build_model_folder(
        module,
        args.out,
        metadata=metadata,
        config=config,
        parity_windows=parity,
        calibration_windows=calibration,
        copy_files={"tokenizer.json": tokenizer_path},
        model_metadata=on_disk,
        parity_source=f"{parity_path.name} (first {n_parity} words, {len(parity)} windows)",
    )
    print(f"built {args.backend} {precision} from {ckpt}")
    for line in report.summary_lines():
        print(line)
    return 0
