"""Add the streaming graph (cached left context) to a model folder.

    python -m training.add_stream_graph CHECKPOINT MODEL_DIR
    python -m training.add_stream_graph --from-graph MODEL_DIR [--base-model DIR]

``streampunct build-engine`` adds it to the onnxruntime int8 and int4 folders it
builds; this adds it to a folder built before, with the same quantization
as the folder's artifact (int8 or int4):

- from the checkpoint that folder's artifact was made from (checked by its
  sidecar's ``source_sha256``);
- or, with ``--from-graph``, from the folder's own quantized graph, imported
  back into torch (``training.onnx_import``, no dither), for folders whose
  checkpoint is gone (``models/base``). ``--base-model`` names the encoder
  config the graph matches, as for the import. The import's weights sit on
  the artifact's quantization grid, so the streaming graph's 4-bit or int8
  codes are the artifact's own, up to rounding at the grid's edges; the
  sidecar records ``weights_from``.

A streaming graph that had static activation scales (``training.static_scales``)
gets the recorded ones back: the same weights give the same ranges.

See engines.build.stream_graph.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

from engines.base import EngineError
from engines.build.stream_graph import build_stream_artifact
from engines.model_meta import has_model_meta, read_model_meta
from engines.sidecar import read_sidecar, sha256_files
from streampunct.errors import InputError, ModelError

logger = logging.getLogger(__name__)


def checkpoint_source(checkpoint: Path) -> str:
    """The ``source_sha256`` build-engine records for artifacts made from ``checkpoint``."""
    return sha256_files([p for p in checkpoint.rglob("*") if p.is_file()], checkpoint)


#: The quantizations a streaming graph is built with (engines.build.stream_graph).
STREAM_PRECISIONS = ("int8", "int4")


def _artifact(model_dir: Path) -> Path:
    """The folder's artifact; refused before any checkpoint is read or graph imported when the
    folder is not a model folder or its artifact is of a precision no streaming graph is built
    with (build_stream_artifact's ExportError, up front)."""
    if not has_model_meta(model_dir):
        raise InputError(f"{model_dir} is not a model folder (no streampunct.json)")
    artifact = model_dir / (read_model_meta(model_dir).artifact or "")
    if artifact.is_file():
        precision = read_sidecar(artifact).precision
        if precision not in STREAM_PRECISIONS:
            raise InputError(f"{artifact} is {precision}: the streaming graph is built as int8 or int4 only")
    return artifact


def _static_ranges(model_dir: Path) -> dict | None:
    """The recipe of the folder's streaming graph when it has static activation scales
    (:mod:`engines.build.static_scales`), to put them back on the graph built again."""
    from engines.build.static_scales import has_static_scales

    meta = read_model_meta(model_dir) if has_model_meta(model_dir) else None
    graph = model_dir / meta.stream_artifact if meta and meta.stream_artifact else None
    if graph is None or not graph.is_file():
        return None
    sidecar = read_sidecar(graph)
    return dict(sidecar.recipe or {}) if has_static_scales(sidecar) else None


def _restore_static_scales(graph: Path, recipe: dict | None) -> Path:
    """The streaming graph just built (dynamic) with the static scales ``recipe`` recorded: the
    same weights, so the same ranges (a graph whose tensors differ keeps dynamic scales, and the
    error says to calibrate it again)."""
    from engines.build.static_scales import replacing, static_scale_graph

    if recipe is None:
        return graph
    ranges = {name: (lo, hi) for name, (lo, hi) in recipe["ranges"].items()}
    with replacing(graph) as out:
        try:
            static_scale_graph(graph, out, ranges, {**recipe["calibration"], "reapplied_by": "training.add_stream_graph"})
        except EngineError as e:
            raise EngineError(f"{graph} was rebuilt with dynamic scales; its recorded static scales do not fit it "
                              f"({e}): run python -m training.static_scales again") from e
    logger.info("put the recorded static activation scales back on %s", graph)
    return graph


def add_stream_graph(checkpoint: Path, model_dir: Path) -> Path:
    from training.checkpoint import load_checkpoint

    artifact = _artifact(model_dir)
    source = checkpoint_source(checkpoint)
    if artifact.is_file() and read_sidecar(artifact).source_sha256 != source:
        raise InputError(f"{checkpoint} is not the checkpoint {artifact} was built from (source_sha256 differs)")
    static = _static_ranges(model_dir)
    model, _ = load_checkpoint(checkpoint)
    return _restore_static_scales(build_stream_artifact(model, model_dir, source_sha256=source), static)


def add_stream_graph_from_graph(model_dir: Path, base_model: str = "") -> Path:
    from training.checkpoint import load_checkpoint
    from training.onnx_import import import_runtime_model

    artifact = _artifact(model_dir)
    if not artifact.is_file():
        raise InputError(f"{model_dir} names no artifact to import ({artifact.name} is missing)")
    static = _static_ranges(model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        import_runtime_model(model_dir, Path(tmp) / "imported", base_model=base_model)
        model, _ = load_checkpoint(Path(tmp) / "imported")
        graph = build_stream_artifact(model, model_dir, source_sha256=read_sidecar(artifact).source_sha256,
                                      weights_from=f"{artifact.name} (training.onnx_import, no dither)")
    return _restore_static_scales(graph, static)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m training.add_stream_graph", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", type=Path, nargs="+", metavar="PATH",
                   help="CHECKPOINT MODEL_DIR, or MODEL_DIR with --from-graph")
    p.add_argument("--from-graph", action="store_true",
                   help="import the folder's own quantized graph instead of naming its checkpoint")
    p.add_argument("--base-model", default="", help="with --from-graph: encoder folder whose config the graph matches")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    want = 1 if args.from_graph else 2
    if len(args.paths) != want:
        p.error("expected MODEL_DIR with --from-graph" if args.from_graph else "expected CHECKPOINT MODEL_DIR")
    try:
        if args.from_graph:
            print(add_stream_graph_from_graph(args.paths[0], args.base_model))
        else:
            print(add_stream_graph(*args.paths))
    except (InputError, ModelError, EngineError) as e:  # the folder or checkpoint refused: one line, status 2
        hint = ""
        if isinstance(e, ModelError) and args.from_graph and not args.base_model:
            hint = " (is the graph of another encoder? --base-model names the folder whose config it matches)"
        p.exit(2, f"{p.prog}: error: {e}{hint}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
