"""Weight-space interpolation of two checkpoints of one model (WiSE-FT, Wortsman et al. 2022).

A model fine-tuned from a starting point stays in that point's basin: the
weights ``(1 - t) * start + t * tuned`` often keep most of what the start knew
(here: TED punctuation) and most of what the fine-tuning added (conversational
speech). ``t`` is chosen on validation::

    python -m training.interpolate cache/default_fp32 checkpoints/release_v2/best \\
        --t 0.5 --out checkpoints/release_v2_t50

Parameters present in only one checkpoint (a case head the start lacks) are
taken from that checkpoint; the metadata (window, training record) is the
tuned one's, with the interpolation recorded.

The start can also be a shipped runtime folder whose quantized graph the tuned
model was trained from (``training.onnx_import``): its de-quantized weights
are the start. They sit on that graph's grid, so an export of the mix to the
same quantization would round most of ``t`` times a small move back to the old
codes; ``--dither 0.5`` adds uniform noise of +-half a quantization step (the
import's dither, seeded) on top of the mix, so the export keeps the mix in
expectation. ``models/base`` of release 3 is made this way (docs/training.md)::

    python -m training.interpolate build/release2/models/base checkpoints/release3_teacher_repair/best \
        --t 0.5 --dither 0.5 --seed 16 --out checkpoints/release3_base
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from streampunct.errors import InputError, ModelError
from training.cli_support import run_tool

log = logging.getLogger(__name__)


def _runtime_start(start: Path, dither: float, seed: int):
    """A runtime folder's de-quantized weights, and the dither noise on them (None without dither)."""
    import numpy as np
    import torch

    from training.onnx_import import onnx_state_dict, runtime_graph

    graph = runtime_graph(start)
    plain = {k: torch.from_numpy(np.array(v)) for k, v in onnx_state_dict(graph).items()}
    if not dither:
        return plain, None, str(graph)
    noisy = onnx_state_dict(graph, dither=dither, seed=seed)
    return plain, {k: torch.from_numpy(np.array(noisy[k])) - plain[k] for k in plain}, str(graph)


def interpolate(start: str | Path, tuned: str | Path, t: float, out: str | Path, *,
                dither: float = 0.0, seed: int = 0) -> Path:
    """Write the checkpoint ``(1 - t) * start + t * tuned`` to ``out``. ``start`` is a
    checkpoint or a runtime model folder (its graph's de-quantized weights); ``dither`` (a
    runtime start only) adds +-``dither`` quantization steps of the start graph's seeded noise."""
    from training.checkpoint import load_checkpoint, save_checkpoint
    from training.evaluation import is_runtime_model

    if not 0.0 <= t <= 1.0:
        raise InputError(f"--t must be in [0, 1], got {t}")
    b, meta = load_checkpoint(tuned)
    sb = b.state_dict()
    noise, graph = None, None
    if is_runtime_model(Path(start)):
        sa, noise, graph = _runtime_start(Path(start), dither, seed)
    elif dither:
        raise InputError(f"--dither needs a runtime model folder as the start (a quantized graph); "
                         f"{start} is a checkpoint")
    else:
        a, _ = load_checkpoint(start)
        sa = a.state_dict()
    only_start = sorted(set(sa) - set(sb))
    if graph is not None:  # a graph holds every parameter of the model it was exported from
        only_tuned = sorted(k for k, v in sb.items() if k not in sa and v.is_floating_point()
                            and not k.endswith("position_ids"))
        if only_tuned:
            raise ModelError(f"{start}'s graph lacks parameters of {tuned}: {only_tuned[:5]}")
    if only_start:
        raise ModelError(f"{start} has parameters {tuned} lacks: {only_start[:5]}")
    merged = {}
    for name, wb in sb.items():
        wa = sa.get(name)
        if wa is None:
            merged[name] = wb
            continue
        if wa.shape != wb.shape:
            raise ModelError(f"{name}: shape {tuple(wa.shape)} in {start}, {tuple(wb.shape)} in {tuned}")
        if not wb.is_floating_point():
            merged[name] = wb
            continue
        merged[name] = (1.0 - t) * wa + t * wb
        if noise is not None:  # a runtime start's noise covers every parameter it has
            merged[name] = merged[name] + noise[name]
    b.load_state_dict(merged)
    record = {"start": str(start), "tuned": str(tuned), "t": t}
    if graph is not None:
        record.update(start_graph=graph, dither=dither, seed=seed)
    meta = {**meta, "interpolation": record, "name": f"{meta.get('name', 'model')}_t{round(100 * t)}"}
    path = save_checkpoint(out, b, Path(tuned), meta)
    log.info("wrote %s = %.2f * %s + %.2f * %s", path, 1 - t, start, t, tuned)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.interpolate", description=__doc__.split("\n")[0])
    ap.add_argument("start", help="checkpoint (or runtime model folder) the fine-tuning started from")
    ap.add_argument("tuned", help="the fine-tuned checkpoint")
    ap.add_argument("--t", type=float, required=True, help="weight of the tuned checkpoint, 0..1")
    ap.add_argument("--out", required=True)
    ap.add_argument("--dither", type=float, default=0.0,
                    help="runtime start only: +-D quantization steps of the start graph's noise on the mix "
                         "(0-0.5; 0.5 keeps a later export to the same quantization from rounding the mix back)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the dither noise")
    args = ap.parse_args(argv)
    return run_tool(lambda: interpolate(args.start, args.tuned, args.t, args.out, dither=args.dither,
                                        seed=args.seed))


if __name__ == "__main__":
    raise SystemExit(main())
