"""Double-overlap window tuning (Chen et al.): grid search of W, L, R on validation data.

Each geometry decodes the validation documents with the offline decoder and
is scored by overall F1; the best is written into the checkpoint's
``streampunct.json`` (``window``) together with the whole grid
(``window_tuning``), so the service starts with the tuned values.

``--stream-lefts`` tunes the streaming geometry instead: the left context of
the server's windows (``stream_window``), scored on the validation text
played as one live stream with the server's default session options
(:func:`streampunct.evaluation.live_schedule`, the labels a server gives
it). Less left context is fewer tokens per finalized word; the least within
``tolerance`` points of the best is chosen. Never run either on a test set.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from streampunct.alignment import Aligner
from streampunct.metrics import Report
from streampunct.windowing import WindowConfig
from training.config import EvalConfig
from training.data import Document
from training.evaluation import RuntimeModel, validate

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


def search_windows(score: Callable[[WindowConfig], Report], grid: Sequence[WindowConfig],
                   *, tolerance: float = 0.0) -> tuple[WindowConfig, list[dict[str, Any]]]:
    """The geometry with the best ``score(w).overall_f1`` (ties: the larger step, i.e. cheaper).

    With ``tolerance`` > 0, the largest step (then the best F1) among the geometries
    within ``tolerance`` points of the best: differences below the validation set's
    noise should not buy a more expensive window (more overlap = more tokens decoded).
    """
    if not grid:
        raise ValueError("empty window grid")
    if tolerance < 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    rows = []
    scored: list[tuple[float, WindowConfig]] = []
    for w in grid:
        report = score(w)
        rows.append({**w.to_dict(), "overall_f1": round(report.overall_f1, 2),
                     "per_class_f1": {k: round(f, 2) for k, (_, _, f) in report.per_class.items()}})
        log.info("window W=%d L=%d R=%d: overall F1 %.2f", w.size, w.left, w.right, report.overall_f1)
        scored.append((round(report.overall_f1, 6), w))
    top = max(f for f, _ in scored)
    near = [(w.step, f, w) for f, w in scored if f >= top - tolerance]
    return max(near, key=lambda t: t[:2])[2], rows


def tune_windows(model: nn.Module, aligner: Aligner, docs: Sequence[Document],
                 grid: Sequence[WindowConfig], *, batch_size: int = 32
                 ) -> tuple[WindowConfig, list[dict[str, Any]]]:
    """Grid search for a torch model (training checkpoints)."""
    return search_windows(lambda w: validate(model, aligner, docs, w, batch_size=batch_size).report, grid)


def tune_runtime_windows(model: RuntimeModel, docs: Sequence[Document], grid: Sequence[WindowConfig],
                         *, batch_size: int = 32, tolerance: float = 0.0
                         ) -> tuple[WindowConfig, list[dict[str, Any]]]:
    """Grid search for a runtime model folder's engine (e.g. the shipped int8 model)."""
    return search_windows(lambda w: model.validate(docs, w, batch_size=batch_size).report, grid,
                          tolerance=tolerance)


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


def tune_model_folder(directory: str | Path, docs: Sequence[Document], grid: Sequence[WindowConfig],
                      *, set_name: str = "validation", tolerance: float = 0.0) -> dict[str, int]:
    """Tune the window of a runtime model folder (ONNX engine) in place; returns the chosen geometry."""
    directory = Path(directory)
    model = RuntimeModel.open(directory)
    try:
        best, rows = tune_runtime_windows(model, docs, grid, tolerance=tolerance)
    finally:
        model.close()
    meta_path = directory / "streampunct.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if "window_tuning" in meta and meta["window_tuning"].get("engine") != "onnxruntime":
        meta["window_tuning_at_training"] = meta["window_tuning"]  # the torch grid of the checkpoint
    meta["window"] = best.to_dict()
    meta["window_tuning"] = {"set": set_name, "engine": "onnxruntime", "tolerance": tolerance,
                             "grid": rows, "chosen": best.to_dict()}
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return best.to_dict()


def live_score(punctuator, words: Sequence[str], labels: Sequence[int], window: WindowConfig) -> Report:
    """Overall figures of ``words`` played as one live stream (1-4-word chunks at 2.5 words/s,
    the server's default session options) through an open
    :class:`~streampunct.punctuator.Punctuator`'s engine, with streaming windows ``window``."""
    from streampunct.evaluation import live_schedule, schedule_labels, score
    from streampunct.options import SessionOptions

    pred = schedule_labels(live_schedule(words), punctuator.aligner, window, punctuator.engine.infer,
                           SessionOptions())
    return score(labels, pred)


def tune_stream_left(directory: str | Path, docs: Sequence[Document], lefts: Sequence[int], *,
                     set_name: str = "validation", tolerance: float = 0.5,
                     score: Callable[[WindowConfig], Report] | None = None) -> dict[str, int]:
    """Choose the streaming left context of a runtime model folder in place: the least left
    context within ``tolerance`` overall F1 points of the best live score (with size and
    right fixed, the largest step of :func:`search_windows`). Writes ``stream_window``
    (``{"left": L}``; size and right stay the offline window's) and the grid
    (``stream_window_tuning``). Returns the chosen ``stream_window``. ``score`` defaults to
    :func:`live_score` with the folder's engine, opened once for the whole grid."""
    from streampunct.model import load_model_info
    from streampunct.punctuator import Punctuator

    directory = Path(directory)
    info = load_model_info(directory)
    grid = [WindowConfig(info.window.size, left, info.window.right) for left in sorted(set(lefts))]
    for window in grid:
        window.validate_for(info.max_word_tokens)
    if score is not None:
        best, rows = search_windows(score, grid, tolerance=tolerance)
    else:
        words = [w for d in docs for w in d.words]
        labels = [lab for d in docs for lab in d.labels]
        punctuator = Punctuator.from_model_dir(directory)
        try:
            best, rows = search_windows(lambda w: live_score(punctuator, words, labels, w), grid,
                                        tolerance=tolerance)
        finally:
            punctuator.close()
    chosen = {"left": best.left}
    meta_path = directory / "streampunct.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["stream_window"] = chosen
    meta["stream_window_tuning"] = {
        "set": set_name, "engine": "onnxruntime", "tolerance": tolerance, "grid": rows, "chosen": chosen,
        "stream": "one live stream: 1-4-word chunks at 2.5 words/s, the server's default session options",
    }
    meta_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m training.window_tuning MODEL_DIR``: tune a runtime model folder on validation data."""
    from training.data import data_root, load_validation_docs, resolve_cache

    ap = argparse.ArgumentParser(prog="python -m training.window_tuning", description=main.__doc__)
    ap.add_argument("model", type=Path, help="runtime model folder (ONNX artifact + streampunct.json)")
    ap.add_argument("--valid", default="dev2010", help="validation source (never a test set; default dev2010)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[62, 94, 126])
    ap.add_argument("--lefts", type=int, nargs="+", default=[20, 30, 40])
    ap.add_argument("--rights", type=int, nargs="+", default=[10, 15, 20])
    ap.add_argument("--tolerance", type=float, default=0.5,
                    help="take the cheapest geometry (largest step) within this many F1 points of the "
                         "best (default 0.5: below the noise of a 17k-word validation set)")
    ap.add_argument("--stream-lefts", type=int, nargs="+", default=None, metavar="L",
                    help="tune the streaming left context instead (stream_window), over these values, on "
                         "the validation text played as one live stream at the server's defaults")
    ap.add_argument("--data-root", default=None, help="data folder (default: $STREAMPUNCT_DATA or ../shared/data)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    docs = load_validation_docs(args.valid, data_root(args.data_root or ""), resolve_cache("cache"))
    if args.stream_lefts:
        chosen = tune_stream_left(args.model, docs, args.stream_lefts, set_name=args.valid,
                                  tolerance=args.tolerance)
        print(f"chosen stream_window: {chosen} (written to {args.model / 'streampunct.json'})")
        return 0
    meta = json.loads((args.model / "streampunct.json").read_text(encoding="utf-8"))
    grid = window_grid(args.sizes, args.lefts, args.rights, int(meta.get("max_word_tokens", 16)))
    chosen = tune_model_folder(args.model, docs, grid, set_name=args.valid, tolerance=args.tolerance)
    print(f"chosen window: {chosen} (written to {args.model / 'streampunct.json'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
