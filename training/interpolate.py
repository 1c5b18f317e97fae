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
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from streampunct.errors import InputError, ModelError
from training.cli_support import run_tool

log = logging.getLogger(__name__)


def interpolate(start: str | Path, tuned: str | Path, t: float, out: str | Path) -> Path:
    """Write the checkpoint ``(1 - t) * start + t * tuned`` to ``out``."""
    from training.checkpoint import load_checkpoint, save_checkpoint

    if not 0.0 <= t <= 1.0:
        raise InputError(f"--t must be in [0, 1], got {t}")
    a, _ = load_checkpoint(start)
    b, meta = load_checkpoint(tuned)
    sa, sb = a.state_dict(), b.state_dict()
    only_start = sorted(set(sa) - set(sb))
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
        merged[name] = wb if not wb.is_floating_point() else (1.0 - t) * wa + t * wb
    b.load_state_dict(merged)
    record = {"start": str(start), "tuned": str(tuned), "t": t}
    meta = {**meta, "interpolation": record, "name": f"{meta.get('name', 'model')}_t{round(100 * t)}"}
    path = save_checkpoint(out, b, Path(tuned), meta)
    log.info("wrote %s = %.2f * %s + %.2f * %s", path, 1 - t, start, t, tuned)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.interpolate", description=__doc__.split("\n")[0])
    ap.add_argument("start", help="checkpoint the fine-tuning started from")
    ap.add_argument("tuned", help="the fine-tuned checkpoint")
    ap.add_argument("--t", type=float, required=True, help="weight of the tuned checkpoint, 0..1")
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    return run_tool(lambda: interpolate(args.start, args.tuned, args.t, args.out))


if __name__ == "__main__":
    raise SystemExit(main())
