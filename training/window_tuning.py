"""Double-overlap window tuning (Chen et al.): grid search of W, L, R on validation data.

Each geometry decodes the validation documents with the offline decoder and
is scored by overall F1; the best is written into the checkpoint's
``streampunct.json`` (``window``) together with the whole grid
(``window_tuning``), so the service starts with the tuned values. Never run
this on a test set.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from torch import nn

from streampunct.alignment import Aligner
from streampunct.windowing import WindowConfig
from training.config import EvalConfig
from training.data import Document
from training.evaluation import validate

log = logging.getLogger(__name__)


def window_grid(sizes: Sequence[int], lefts: Sequence[int], rights: Sequence[int],
                max_word_tokens: int) -> list[WindowConfig]:
    """All valid geometries of the grid (each must hold L + R + two whole words)."""
    out = []
    for size, left, right in itertools.product(sizes, lefts, rights):
        w = WindowConfig(size, left, right)
        try:
            w.validate_for(max_word_tokens)
        except ValueError:
            continue
        out.append(w)
    return out


def tune_windows(model: nn.Module, aligner: Aligner, docs: Sequence[Document],
                 grid: Sequence[WindowConfig], *, batch_size: int = 32
                 ) -> tuple[WindowConfig, list[dict[str, Any]]]:
    """The geometry with the best validation overall F1 (ties: the larger step, i.e. cheaper)."""
    if not grid:
        raise ValueError("empty window grid")
    rows = []
    best: tuple[float, int, WindowConfig] | None = None
    for w in grid:
        v = validate(model, aligner, docs, w, batch_size=batch_size)
        rows.append({**w.to_dict(), "overall_f1": round(v.overall_f1, 2),
                     "per_class_f1": {k: round(f, 2) for k, (_, _, f) in v.report.per_class.items()}})
        log.info("window W=%d L=%d R=%d: overall F1 %.2f", w.size, w.left, w.right, v.overall_f1)
        key = (round(v.overall_f1, 6), w.step, w)
        if best is None or key[:2] > best[:2]:
            best = key
    assert best is not None
    return best[2], rows


def tune_checkpoint_windows(directory: str | Path, docs: Sequence[Document], cfg: EvalConfig, *,
                            max_word_tokens: int, log=None) -> dict[str, int]:
    """Tune the windows of a checkpoint folder in place; returns the chosen geometry."""
    from training.checkpoint import checkpoint_aligner, load_checkpoint

    directory = Path(directory)
    model, meta = load_checkpoint(directory)
    aligner = checkpoint_aligner(directory, meta)
    grid = window_grid(cfg.tune_sizes, cfg.tune_lefts, cfg.tune_rights, max_word_tokens)
    best, rows = tune_windows(model, aligner, docs, grid, batch_size=cfg.batch_size)
    meta["window"] = best.to_dict()
    meta["window_tuning"] = {"set": "validation", "grid": rows, "chosen": best.to_dict()}
    (directory / "streampunct.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n",
                                                encoding="utf-8")
    if log is not None:
        log.write("window_tuning", grid=rows, chosen=best.to_dict())
    return best.to_dict()
