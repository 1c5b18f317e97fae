"""Add the streaming graph (cached left context) to a model folder built from a checkpoint.

    python -m training.add_stream_graph CHECKPOINT MODEL_DIR

``streampunct build-engine`` adds it to the onnxruntime int8 folders it
builds; this adds it to a folder built before, from the checkpoint that
folder's int8 artifact was made from (checked by its sidecar's
``source_sha256``), with the same quantization. See engines.stream_graph.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from engines.sidecar import read_sidecar, sha256_files
from engines.stream_graph import build_stream_artifact
from streampunct.errors import InputError


def checkpoint_source(checkpoint: Path) -> str:
    """The ``source_sha256`` build-engine records for artifacts made from ``checkpoint``."""
    return sha256_files([p for p in checkpoint.rglob("*") if p.is_file()], checkpoint)


def add_stream_graph(checkpoint: Path, model_dir: Path) -> Path:
    from training.checkpoint import load_checkpoint

    meta_path = model_dir / "streampunct.json"
    if not meta_path.is_file():
        raise InputError(f"{model_dir} is not a model folder (no streampunct.json)")
    source = checkpoint_source(checkpoint)
    artifact = model_dir / str(json.loads(meta_path.read_text(encoding="utf-8")).get("artifact", ""))
    if artifact.is_file() and read_sidecar(artifact).source_sha256 != source:
        raise InputError(f"{checkpoint} is not the checkpoint {artifact} was built from (source_sha256 differs)")
    model, _ = load_checkpoint(checkpoint)
    return build_stream_artifact(model, model_dir, source_sha256=source)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.add_stream_graph", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint", type=Path, help="the training checkpoint the folder's artifact was built from")
    p.add_argument("model_dir", type=Path)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        print(add_stream_graph(args.checkpoint, args.model_dir))
    except InputError as e:
        raise SystemExit(f"error: {e}") from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
