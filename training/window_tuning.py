"""Double-overlap window tuning (Chen et al.): grid search of W, L, R on validation data.

Each geometry decodes the validation documents with the offline decoder and
is scored by overall F1; the best is written into the checkpoint's
``streampunct.json`` (``window``) together with the whole grid
(``window_tuning``), so the service starts with the tuned values.

``--stream-lefts`` tunes the streaming geometry instead: the left context of
the server's windows (``stream_window``), scored on the validation text
played as one live stream with the server's default session options
(:func:`streampunct.evaluation.accuracy.live_schedule`, the labels a server gives
it). Less left context is fewer tokens per finalized word; the least within
``tolerance`` points of the best is chosen. Never run either on a test set.

``--stream-cache-tokens`` tunes the length of the cached left context of a
folder with a streaming graph (``stream_artifact``; ``streampunct build-engine``
adds one to onnxruntime int8 and int4 folders): each validation set of ``--valid``
(default dev2010 and SwDA validation) is played as one live stream at the
server's defaults without the cache, then with each capacity
(:func:`tune_stream_cache`). The rule (:func:`choose_stream_cache`): the
highest mean F1 over the sets; among the capacities within 0.1 of that best
mean, the fewest tokens (memory per session). Guard (benchmarks/results/
kv_cache/RULE.md): if on any set the chosen capacity scores more than 0.3
under whole windows, the cache is not enabled: ``stream_cache_tokens`` is
written anyway, with ``"stream_cache": false``, which makes the server's and
the simulations' ``--stream-cache auto`` serve whole windows for that folder
(``--stream-cache on`` still uses the graph; streampunct.model); when the
guard passes, a ``stream_cache`` key is removed. The grid goes under
``stream_cache_tuning`` (set, stream, without_cache, grid, chosen, rule).
"""

from __future__ import annotations

import argparse
import itertools
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from engines.base import ArtifactError
from engines.model_meta import metadata_path, read_model_meta, write_model_meta
from streampunct.core.alignment import Aligner
from streampunct.core.windowing import WindowConfig
from streampunct.evaluation.scores import Report
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
    write_model_meta(directory, meta)
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
    meta = read_model_meta(directory).to_dict()
    if "window_tuning" in meta and meta["window_tuning"].get("engine") != "onnxruntime":
        meta["window_tuning_at_training"] = meta["window_tuning"]  # the torch grid of the checkpoint
    meta["window"] = best.to_dict()
    meta["window_tuning"] = {"set": set_name, "engine": "onnxruntime", "tolerance": tolerance,
                             "grid": rows, "chosen": best.to_dict()}
    write_model_meta(directory, meta)
    return best.to_dict()


def live_score(punctuator, words: Sequence[str], labels: Sequence[int], window: WindowConfig, *,
               stream_engine: object | None = None) -> Report:
    """Overall figures of ``words`` played as one live stream (1-4-word chunks at 2.5 words/s,
    the server's default session options) through an open
    :class:`~streampunct.core.decoder.OfflineDecoder`'s engine, with streaming windows ``window``;
    with ``stream_engine`` (its streaming graph) the windows run with cached left context of
    ``stream_engine.cache_tokens`` tokens, as the server runs them."""
    from streampunct.core.options import SessionOptions
    from streampunct.evaluation.accuracy import live_schedule, schedule_labels, score

    pred = schedule_labels(live_schedule(words), punctuator.aligner, window, punctuator.engine.infer,
                           SessionOptions(), stream_engine=stream_engine)
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
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.model import load_model_info

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
        punctuator = OfflineDecoder.from_model_dir(directory)
        try:
            best, rows = search_windows(lambda w: live_score(punctuator, words, labels, w), grid,
                                        tolerance=tolerance)
        finally:
            punctuator.close()
    chosen = {"left": best.left}
    meta = read_model_meta(directory).to_dict()
    meta["stream_window"] = chosen
    meta["stream_window_tuning"] = {
        "set": set_name, "engine": "onnxruntime", "tolerance": tolerance, "grid": rows, "chosen": chosen,
        "stream": "one live stream: 1-4-word chunks at 2.5 words/s, the server's default session options",
    }
    write_model_meta(directory, meta)
    return chosen


#: The validation sets the cache length is tuned on by default (release 6's hand tuning's).
STREAM_CACHE_SETS: tuple[str, ...] = ("dev2010", "swda_val")
#: Capacities within this many points of the best mean F1 count as equal: the fewest tokens wins.
STREAM_CACHE_TOLERANCE = 0.1
#: The cache is not enabled if on any set it scores more than this under whole windows (RULE.md).
STREAM_CACHE_GUARD = 0.3
_SET_NAMES = {"swda_val": "SwDA validation"}
_EPS = 1e-9  # the grid's figures are rounded to 2 decimals: compare them without float noise


@dataclass(frozen=True)
class CacheChoice:
    """The outcome of :func:`choose_stream_cache`.

    Attributes:
        tokens: the chosen capacity (``stream_cache_tokens``).
        enabled: the guard passed: ``--stream-cache auto`` may use the cache.
        best_mean: the highest mean F1 over the sets.
        means: each capacity's mean F1 over the sets.
        near: the capacities within the tolerance of ``best_mean`` (the chosen one is the fewest).
        failing: the sets on which the chosen capacity falls more than the guard under no cache.
    """

    tokens: int
    enabled: bool
    best_mean: float
    means: dict[int, float]
    near: tuple[int, ...]
    failing: tuple[str, ...]


def choose_stream_cache(grid: Sequence[Mapping[str, Any]], without_cache: Mapping[str, float],
                        sets: Sequence[str], *, tolerance: float = STREAM_CACHE_TOLERANCE,
                        guard: float = STREAM_CACHE_GUARD) -> CacheChoice:
    """The cache length rule, pure: ``grid`` rows are ``{"tokens": N, SET: F1, ...}`` for every
    set of ``sets``; ``without_cache`` is ``{SET: F1}`` with whole windows.

    The highest mean F1 over the sets; among the capacities within ``tolerance`` of that best
    mean, the fewest tokens. The cache is ``enabled`` unless the chosen capacity scores below
    the no-cache figure minus ``guard`` on some set (those sets are ``failing``).
    """
    if not sets:
        raise ValueError("no validation sets")
    if not grid:
        raise ValueError("empty cache grid")
    if tolerance < 0 or guard < 0:
        raise ValueError(f"tolerance and guard must be >= 0, got {tolerance} and {guard}")
    missing = [s for s in sets if s not in without_cache]
    if missing:
        raise ValueError(f"no figure without the cache for {', '.join(missing)}")
    means: dict[int, float] = {}
    for row in grid:
        tokens = row["tokens"]
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise ValueError(f"cache capacities are positive integers, not {tokens!r}")
        if tokens in means:
            raise ValueError(f"capacity {tokens} appears twice in the grid")
        absent = [s for s in sets if s not in row]
        if absent:
            raise ValueError(f"capacity {tokens} has no figure for {', '.join(absent)}")
        means[tokens] = sum(float(row[s]) for s in sets) / len(sets)
    best = max(means.values())
    near = tuple(sorted(t for t, m in means.items() if m >= best - tolerance - _EPS))
    chosen = near[0]
    row = next(r for r in grid if r["tokens"] == chosen)
    failing = tuple(s for s in sets if float(row[s]) < float(without_cache[s]) - guard - _EPS)
    return CacheChoice(chosen, not failing, best, means, near, failing)


def stream_cache_rule(choice: CacheChoice, sets: Sequence[str], *, tolerance: float = STREAM_CACHE_TOLERANCE,
                      guard: float = STREAM_CACHE_GUARD) -> str:
    """The rule and how it decided, in words (``stream_cache_tuning.rule``)."""
    best = [t for t, m in choice.means.items() if abs(m - choice.best_mean) <= _EPS]
    text = (f"the highest mean F1 over {' and '.join(sets)} ({choice.best_mean:.2f} with "
            f"{'/'.join(map(str, sorted(best)))} tokens); among the capacities within {tolerance:g} of it "
            f"({', '.join(map(str, choice.near))}), the fewest tokens (memory); guard: no set more than "
            f"{guard:g} under no cache")
    if choice.enabled:
        return text + " (passed)"
    return (text + f" (failed on {', '.join(choice.failing)}: \"stream_cache\": false, so "
            "--stream-cache auto serves whole windows)")


def require_stream_graph(directory: str | Path) -> dict[str, Any]:
    """``directory``'s ``streampunct.json``, which must name a streaming graph that exists;
    :class:`~streampunct.errors.InputError` otherwise."""
    from streampunct.errors import InputError

    directory = Path(directory)
    meta_path = metadata_path(directory)
    try:
        meta = read_model_meta(directory).to_dict()
    except ArtifactError as e:
        raise InputError(f"{directory} is not a model folder ({e})") from None
    name = meta.get("stream_artifact")
    if not name:
        raise InputError(f"{directory} has no streaming graph (no stream_artifact in its streampunct.json), "
                         "so there is no cache to tune: streampunct build-engine adds one to onnxruntime int8 and int4 "
                         f"folders; python -m training.add_stream_graph CHECKPOINT {directory} to a folder built before")
    if not (directory / str(name)).is_file():
        raise InputError(f"{directory / str(name)} (the stream_artifact of {meta_path}) does not exist")
    return meta


def stream_cache_grid(tokens_grid: Sequence[int]) -> list[int]:
    """The capacities to try, sorted and distinct; :class:`~streampunct.errors.InputError`
    unless there is one and each is a positive integer."""
    from streampunct.errors import InputError

    grid = sorted(set(tokens_grid))
    if not grid or any(not isinstance(t, int) or isinstance(t, bool) or t < 1 for t in grid):
        raise InputError(f"cache capacities are positive integers, got {list(tokens_grid)}")
    return grid


def _stream_cache_sets(sets: Sequence[str]) -> str:
    from training.data import source_paths

    names = [_SET_NAMES.get(s, s) for s in sets]
    files = [source_paths(s, Path(".")).name for s in sets]
    return f"{' and '.join(names)} ({', '.join(files)})"


def _stream_precision(directory: Path, meta: Mapping[str, Any]) -> str:
    from engines.sidecar import read_sidecar

    try:
        return read_sidecar(directory / str(meta["stream_artifact"])).precision
    except Exception:  # only a description; a folder scored by an injected score may have no sidecar
        return ""


def tune_stream_cache(directory: str | Path, docs_by_set: Mapping[str, Sequence[Document]],
                      tokens_grid: Sequence[int], *, tolerance: float = STREAM_CACHE_TOLERANCE,
                      guard: float = STREAM_CACHE_GUARD,
                      score: Callable[[str, int | None], float] | None = None) -> CacheChoice:
    """Tune the cached left context of a runtime model folder with a streaming graph, in place.

    Each set of ``docs_by_set`` (name -> validation documents, played as one live stream at
    the server's defaults) is scored without the cache and with each capacity of
    ``tokens_grid``; :func:`choose_stream_cache` decides. Writes ``stream_cache_tokens``,
    ``stream_cache`` (false when the guard fails; removed when it passes) and
    ``stream_cache_tuning``. ``score(set, tokens)`` gives an overall F1 (``tokens`` None:
    whole windows); by default the folder's engine and streaming graph (opened once) play
    the stream (:func:`live_score`). A folder without a streaming graph raises
    :class:`~streampunct.errors.InputError`.
    """
    directory = Path(directory)
    require_stream_graph(directory)
    grid = stream_cache_grid(tokens_grid)
    sets = list(docs_by_set)
    if not sets:
        raise ValueError("no validation sets")
    if score is not None:
        without, rows = _score_cache_grid(score, sets, grid)
    else:
        from streampunct.core.decoder import OfflineDecoder

        data = {s: ([w for d in docs for w in d.words], [lab for d in docs for lab in d.labels])
                for s, docs in docs_by_set.items()}
        # one thread each, as the server's engine workers run on 2 cores (and evaluate --live's graph)
        punctuator = OfflineDecoder.from_model_dir(directory, intra_op_threads=1)
        try:
            engine = punctuator.stream_engine("on", intra_op_threads=1)

            def live(set_name: str, tokens: int | None) -> float:
                if tokens is not None:
                    engine.cache_tokens = tokens  # type: ignore[union-attr]  # serve --stream-cache-tokens
                words, labels = data[set_name]
                return live_score(punctuator, words, labels, punctuator.stream_window,
                                  stream_engine=None if tokens is None else engine).overall_f1

            without, rows = _score_cache_grid(live, sets, grid)
        finally:
            punctuator.close()
    choice = choose_stream_cache(rows, without, sets, tolerance=tolerance, guard=guard)
    meta = read_model_meta(directory).to_dict()
    precision = _stream_precision(directory, meta)
    meta["stream_cache_tokens"] = choice.tokens
    if choice.enabled:
        meta.pop("stream_cache", None)
    else:
        meta["stream_cache"] = False
    meta["stream_cache_tuning"] = {
        "set": _stream_cache_sets(sets),
        "stream": ("one live stream each: 1-4-word chunks at 2.5 words/s, the server's default session options"
                   + (f", {precision}" if precision else "")),
        "without_cache": without,
        "grid": rows,
        "chosen": choice.tokens,
        "rule": stream_cache_rule(choice, sets, tolerance=tolerance, guard=guard),
    }
    write_model_meta(directory, meta)
    return choice


def _score_cache_grid(score: Callable[[str, int | None], float], sets: Sequence[str], grid: Sequence[int]
                      ) -> tuple[dict[str, float], list[dict[str, Any]]]:
    without = {}
    for s in sets:
        without[s] = round(float(score(s, None)), 2)
        log.info("%s without the cache: overall F1 %.2f", s, without[s])
    rows = []
    for tokens in grid:
        row: dict[str, Any] = {"tokens": tokens}
        for s in sets:
            row[s] = round(float(score(s, tokens)), 2)
            log.info("%s with %d cached tokens: overall F1 %.2f", s, tokens, row[s])
        rows.append(row)
    return without, rows


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m training.window_tuning MODEL_DIR``: tune a runtime model folder on validation data."""
    from streampunct.commands.argtypes import non_negative_int, positive_int
    from training.data import data_root, load_validation_docs, resolve_cache

    ap = argparse.ArgumentParser(prog="python -m training.window_tuning", description=main.__doc__)
    ap.add_argument("model", type=Path, help="runtime model folder (ONNX artifact + streampunct.json)")
    ap.add_argument("--valid", nargs="+", default=None, metavar="SET",
                    help="validation source(s), never a test set: one for the window grids (default "
                         "dev2010); with --stream-cache-tokens, the sets scored (default: dev2010 swda_val)")
    ap.add_argument("--sizes", type=positive_int, nargs="+", default=[62, 94, 126])
    ap.add_argument("--lefts", type=non_negative_int, nargs="+", default=[20, 30, 40])
    ap.add_argument("--rights", type=non_negative_int, nargs="+", default=[10, 15, 20])
    ap.add_argument("--tolerance", type=float, default=0.5,
                    help="take the cheapest geometry (largest step) within this many F1 points of the "
                         "best (default 0.5: below the noise of a 17k-word validation set)")
    ap.add_argument("--stream-lefts", type=int, nargs="+", default=None, metavar="L",
                    help="tune the streaming left context instead (stream_window), over these values, on "
                         "the validation text played as one live stream at the server's defaults")
    ap.add_argument("--stream-cache-tokens", type=int, nargs="+", default=None, metavar="N",
                    help="tune the length of the cached left context instead (stream_cache_tokens) of a "
                         "folder with a streaming graph, over these capacities: each --valid set as one "
                         "live stream at the server's defaults; the highest mean F1, the fewest tokens "
                         f"within {STREAM_CACHE_TOLERANCE:g} of it; not enabled (\"stream_cache\": false) "
                         f"if more than {STREAM_CACHE_GUARD:g} under whole windows on a set")
    ap.add_argument("--data-root", default=None, help="data folder (default: $STREAMPUNCT_DATA or ../shared/data)")
    args = ap.parse_args(argv)
    if args.stream_lefts and args.stream_cache_tokens:
        ap.error("--stream-lefts and --stream-cache-tokens tune one thing each: run them one after the other")
    if not args.stream_cache_tokens and args.valid and len(args.valid) > 1:
        ap.error("--valid takes one set for the window grids (several only with --stream-cache-tokens)")
    if not args.stream_cache_tokens and args.tolerance < 0:
        ap.error(f"--tolerance must be >= 0, got {args.tolerance:g}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from engines.base import EngineError
    from streampunct.errors import StreampunctError

    try:
        if args.stream_cache_tokens:
            sets = list(dict.fromkeys(args.valid or STREAM_CACHE_SETS))
            require_stream_graph(args.model)  # before loading any data
            stream_cache_grid(args.stream_cache_tokens)
            root, cache = data_root(args.data_root or ""), resolve_cache("cache")
            docs_by_set = {s: load_validation_docs(s, root, cache) for s in sets}
            choice = tune_stream_cache(args.model, docs_by_set, args.stream_cache_tokens)
            state = "enabled" if choice.enabled else (f"NOT enabled (\"stream_cache\": false; "
                                                       f"{', '.join(choice.failing)} under the guard)")
            print(f"chosen stream_cache_tokens: {choice.tokens}, {state} "
                  f"(written to {args.model / 'streampunct.json'})")
            return 0
        from streampunct.model import load_model_info

        info = load_model_info(args.model)  # a model folder, before loading any data
        if args.stream_lefts:
            _check_stream_lefts(ap, info.window, args.stream_lefts, info.max_word_tokens)
        else:
            grid = window_grid(args.sizes, args.lefts, args.rights, info.max_word_tokens)
            if not grid:
                ap.error(f"--sizes {' '.join(map(str, args.sizes))} --lefts {' '.join(map(str, args.lefts))} "
                         f"--rights {' '.join(map(str, args.rights))} give no valid window for {args.model} "
                         f"(each size must be >= left + right + 2 x {info.max_word_tokens}, its words' "
                         "most tokens, and overlaps >= 0)")
        valid = args.valid[0] if args.valid else "dev2010"
        docs = load_validation_docs(valid, data_root(args.data_root or ""), resolve_cache("cache"))
        if args.stream_lefts:
            chosen = tune_stream_left(args.model, docs, args.stream_lefts, set_name=valid,
                                      tolerance=args.tolerance)
            print(f"chosen stream_window: {chosen} (written to {args.model / 'streampunct.json'})")
            return 0
        chosen = tune_model_folder(args.model, docs, grid, set_name=valid, tolerance=args.tolerance)
    except (StreampunctError, EngineError, FileNotFoundError) as e:
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    print(f"chosen window: {chosen} (written to {args.model / 'streampunct.json'})")
    return 0


def _check_stream_lefts(ap: argparse.ArgumentParser, window: WindowConfig, lefts: Sequence[int],
                        max_word_tokens: int) -> None:
    """A usage error (``ap.error``) unless every ``--stream-lefts`` value fits the folder's window."""
    for left in sorted(set(lefts)):
        try:
            WindowConfig(window.size, left, window.right).validate_for(max_word_tokens)
        except ValueError as e:
            most = window.size - window.right - 2 * max_word_tokens
            fits = f"left from 0 to {most}" if most >= 0 else "no left fits"
            ap.error(f"--stream-lefts {left}: {e} (the folder's window: size {window.size}, "
                     f"right {window.right}: {fits})")


if __name__ == "__main__":
    raise SystemExit(main())
