"""A shallower student: a checkpoint with only some of its encoder's transformer layers.

Streaming cost is per layer: an encoder with 4 of its 6 layers encodes a
window in about two thirds of the time. Dropping layers and then training on
(distilling into) the smaller model is the cheap way to a smaller student
(Sajjad et al. 2023, "On the effect of dropping layers of pre-trained
transformer models"): the kept layers start trained, only their composition
is new::

    python -m training.drop_layers cache/default_v2_fp32 cache/default_v2_l4 --keep 0 1 2 3
    streampunct train --config training/configs/release_v6_repair.toml \\
        --base-model cache/default_v2_l4 --set name=student_l4

The heads are kept as they are; the kept layers keep their order. The
metadata records what was kept.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from streampunct.errors import InputError
from training.cli_support import run_tool

log = logging.getLogger(__name__)


def drop_layers(src: str | Path, keep: list[int], out: str | Path) -> Path:
    """Write ``src`` with only the encoder layers ``keep`` (in their order) to ``out``."""
    import torch.nn as nn

    from training.checkpoint import load_checkpoint, save_checkpoint

    model, meta = load_checkpoint(src)
    layers = model.encoder.encoder.layer
    n = len(layers)
    if not keep:
        raise InputError("--keep names no layer")
    bad = [k for k in keep if not 0 <= k < n]
    if bad:
        raise InputError(f"{src} has layers 0..{n - 1}; --keep names {bad}")
    if sorted(set(keep)) != list(keep):
        raise InputError(f"--keep must name distinct layers in increasing order, got {keep}")
    model.encoder.encoder.layer = nn.ModuleList(layers[k] for k in keep)
    model.encoder.config.num_hidden_layers = len(keep)
    record = {"from": str(src), "layers": n, "kept": list(keep)}
    meta = {**meta, "drop_layers": record, "name": f"{meta.get('name', 'model')}_l{len(keep)}"}
    path = save_checkpoint(out, model, Path(src), meta)
    log.info("wrote %s: layers %s of %d from %s", path, keep, n, src)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.drop_layers", description=__doc__.split("\n")[0])
    ap.add_argument("src", help="checkpoint folder")
    ap.add_argument("out", help="new checkpoint folder")
    ap.add_argument("--keep", type=int, nargs="+", required=True, metavar="K",
                    help="encoder layers to keep, 0-based, increasing (e.g. 0 1 2 3)")
    args = ap.parse_args(argv)
    return run_tool(lambda: drop_layers(args.src, args.keep, args.out))


if __name__ == "__main__":
    raise SystemExit(main())
