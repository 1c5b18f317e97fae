"""From a torch module to a runtime model folder, with parity figures (``build-engine``).

The folder gets ``model.onnx`` (always, fp32) and, by backend and precision:

============  =========  ==========================================
backend       precision  artifacts
============  =========  ==========================================
onnxruntime   fp32       model.onnx
onnxruntime   int8       model.int8.onnx (dynamic int8 MatMul weights)
onnxruntime   int4       model.int4.onnx (4-bit block-quantized MatMul weights)
onnxruntime   fp16       model.fp16.onnx
tensorrt      fp16       model.fp16.onnx -> model.fp16.plan
tensorrt      int8       model.qdq.onnx (Q/DQ) -> model.int8.plan
tensorrt      fp32       model.fp32.plan
============  =========  ==========================================

each with its sidecar, plus the files to copy (tokenizer.json) and
``streampunct.json`` with ``"artifact"`` naming the default artifact. Every
artifact this host can run is compared with the torch module on validation
windows; the figures go into its sidecar's ``parity`` and into the report.

``BuildConfig.graph_only`` stops a TensorRT build before the builder: the folder
then holds the graph TensorRT takes (``model.onnx``, ``model.fp16.onnx`` or
``model.qdq.onnx``, named as its artifact), checked and with parity, on a host
without TensorRT. A module rebuilt from a model folder's own graph
(:mod:`engines.build.from_graph`) is built like any module; ``source_graph``
then names that graph, and every artifact's labels are also compared with it.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engines.base import PRECISIONS, EngineError, GraphPrepError
from engines.build.onnx_export import (
    DEFAULT_OPSET,
    ExportResult,
    export_onnx,
    sample_batch,
    vocab_size_of,
)
from engines.build.parity import ParityReport, ParityWindows, compare_logits, parity_on_windows
from engines.build.tensorrt_build import TrtBuildOptions
from engines.build.torch_engine import TorchEngine
from engines.model_meta import TOKENIZER_FILE, tokenizer_sha256, write_model_meta
from engines.sidecar import read_sidecar, write_sidecar

logger = logging.getLogger(__name__)

BUILD_BACKENDS = ("onnxruntime", "tensorrt")


@dataclass(frozen=True)
class BuildConfig:
    """What to build.

    Attributes:
        backend: ``onnxruntime`` or ``tensorrt``.
        precision: ``fp32``, ``fp16``, ``int8`` or ``int4`` (onnxruntime only).
        opset: ONNX opset of the export.
        per_channel: per-channel weight scales for ORT dynamic int8.
        reduce_range: 7-bit int8 weights (same labels on every x86 CPU; see
            engines.build.quantize.DynamicQuantOptions).
        quantize_embeddings: ORT int8 / int4 also quantize the embedding tables.
        qdq_high_precision: type of the non-quantized part of the Q/DQ graph.
        trt: TensorRT build options (profile limits, workspace, timing cache).
        parity_batch_size: windows per engine call in the parity run.
        graph_only: tensorrt: stop before the TensorRT builder (no plan); the prepared
            graph (or model.onnx for fp32) becomes the folder's artifact.
    """

    backend: str = "onnxruntime"
    precision: str = "int8"
    opset: int = DEFAULT_OPSET
    per_channel: bool = True
    reduce_range: bool = True
    quantize_embeddings: bool = False
    qdq_high_precision: str = "fp16"
    trt: TrtBuildOptions = field(default_factory=TrtBuildOptions)
    parity_batch_size: int = 16
    graph_only: bool = False

    def __post_init__(self) -> None:
        if self.backend not in BUILD_BACKENDS:
            raise EngineError(f"backend must be one of {BUILD_BACKENDS}, got {self.backend!r}")
        if self.precision not in PRECISIONS:
            raise EngineError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.precision == "int4" and self.backend != "onnxruntime":
            raise EngineError("int4 (4-bit weights, MatMulNBits) is an onnxruntime precision")
        if self.graph_only and self.backend != "tensorrt":
            raise EngineError("graph_only stops a TensorRT build before the builder: backend must be tensorrt")


@dataclass(frozen=True)
class BuildReport:
    """What :func:`build_model_folder` wrote and measured.

    Attributes:
        out_dir: the model folder.
        artifact: the default artifact (named in streampunct.json).
        written: every file written, in order.
        export: the ONNX export result (verify figures on random shapes).
        parity: artifact name -> figures against the torch module.
        parity_vs_onnx: artifact name -> figures against ORT fp32 (derived artifacts).
        parity_source: what the parity figures were measured on.
        parity_vs_source: artifact name -> figures against ``source_graph`` (the graph a
            module was rebuilt from), when there is one.
        source_graph: that graph, or None.
        source_windows_a_call: windows a call of ``source_graph`` in its parity runs (1 for
            a graph whose rows depend on their batch; 0 when it was not run).
    """

    out_dir: Path
    artifact: Path
    written: tuple[Path, ...]
    export: ExportResult
    parity: Mapping[str, ParityReport]
    parity_vs_onnx: Mapping[str, ParityReport]
    parity_source: str
    parity_vs_source: Mapping[str, ParityReport] = field(default_factory=dict)
    source_graph: Path | None = None
    source_windows_a_call: int = 0

    def summary_lines(self) -> list[str]:
        lines = [f"wrote {self.out_dir}/ (default artifact: {self.artifact.name})"]
        for path in self.written:
            size = path.stat().st_size
            lines.append(f"  {path.name:<28} {size / 1e6:9.2f} MB")
        lines.append(f"parity on {self.parity_source}:")
        for name, report in self.parity.items():
            lines.append(
                f"  {name:<20} vs torch: max |diff| {report.max_abs_diff:.3g} "
                f"(rel {report.max_rel_diff:.2e}), label agreement "
                f"{100 * report.label_agreement:.2f}% of {report.n_labels}"
            )
        for name, report in self.parity_vs_onnx.items():
            lines.append(
                f"  {name:<20} vs model.onnx (ORT fp32): label agreement "
                f"{100 * report.label_agreement:.2f}% of {report.n_labels}"
            )
        for name, report in self.parity_vs_source.items():
            assert self.source_graph is not None
            lines.append(
                f"  {name:<20} vs {self.source_graph.name} (the source graph, ORT): label agreement "
                f"{100 * report.label_agreement:.2f}% of {report.n_labels}"
                + (" (it ran one window a call)" if self.source_windows_a_call == 1 else "")
            )
        return lines


def _artifact_plan(config: BuildConfig) -> tuple[str | None, str | None]:
    """(prepared ONNX name, plan name) for the configuration (None where not built)."""
    if config.backend == "onnxruntime":
        return {"fp32": None, "int8": "model.int8.onnx", "int4": "model.int4.onnx",
                "fp16": "model.fp16.onnx"}[config.precision], None
    onnx_name = {"fp32": None, "fp16": "model.fp16.onnx", "int8": "model.qdq.onnx"}[config.precision]
    return onnx_name, f"model.{config.precision}.plan"


def _prepare(config: BuildConfig, fp32: Path, out: Path, calibration: ParityWindows | None) -> None:
    name = out.name
    if name == "model.int8.onnx":
        from engines.build.quantize import DynamicQuantOptions, quantize_int8_dynamic

        quantize_int8_dynamic(fp32, out, DynamicQuantOptions(
            per_channel=config.per_channel, reduce_range=config.reduce_range,
            quantize_embeddings=config.quantize_embeddings,
        ))
        return
    if name == "model.int4.onnx":
        from engines.build.quantize import Int4Options, quantize_int4_weights

        quantize_int4_weights(fp32, out, Int4Options(quantize_embeddings=config.quantize_embeddings))
        return
    if calibration is None or len(calibration) == 0:
        raise GraphPrepError(f"{name} needs calibration windows of validation text")
    feed = calibration.calibration_feed(len(calibration))
    from engines.build import graph_prep

    if name == "model.fp16.onnx":
        graph_prep.prepare_fp16(fp32, out, feed)
    else:
        graph_prep.prepare_int8_qdq(fp32, out, feed, high_precision=config.qdq_high_precision)


def _open(path: Path):
    if path.suffix == ".plan":
        from engines.tensorrt_engine import TensorRTEngine

        return TensorRTEngine(path)
    from engines.ort_engine import OrtEngine

    return OrtEngine(path)


def _open_source(path: Path):
    """The graph a module was rebuilt from, in ONNX Runtime (a streaming graph runs whole windows)."""
    from engines.ort_engine import open_engine

    return open_engine(path.parent, path, {})


def _random_parity(reference, engine, vocab: int) -> ParityReport:
    reports = []
    for i, (batch, seq) in enumerate(((4, 64), (2, 128))):
        ids, mask = sample_batch(batch, seq, vocab, seed=100 + i)
        reports.append(compare_logits(reference(ids, mask), engine.infer(ids, mask), mask))
    return max(reports, key=lambda r: r.max_rel_diff)


def build_model_folder(
    module: Any,
    out_dir: str | Path,
    *,
    config: BuildConfig,
    model_metadata: Mapping[str, Any],
    source_sha256: str = "",
    parity_windows: ParityWindows | None = None,
    calibration_windows: ParityWindows | None = None,
    copy_files: Mapping[str, Path] | None = None,
    parity_source: str = "",
    source_graph: Path | None = None,
    weights_from: Mapping[str, Any] | None = None,
) -> BuildReport:
    """Export ``module``, derive the artifacts ``config`` asks for, check parity, and
    write the runtime model folder ``out_dir``.

    ``copy_files`` maps destination names to files (e.g. ``tokenizer.json``);
    ``model_metadata`` (the model's labels, label position, window and
    record, which this package passes through unread) becomes
    streampunct.json with ``"artifact"`` set; ``source_sha256`` names the
    checkpoint in every sidecar.
    Without ``parity_windows`` the parity figures use random token ids.
    ``source_graph``: the graph ``module`` was rebuilt from (:mod:`engines.build.from_graph`);
    with parity windows every artifact's labels are compared with it too. ``weights_from``
    goes into the export's recipe (where the weights came from).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    export = export_onnx(
        module, out_dir / "model.onnx", source_sha256=source_sha256, opset=config.opset
    )
    if weights_from:
        write_sidecar(export.sidecar.replace(
            recipe={**(export.sidecar.recipe or {}), "weights_from": dict(weights_from)}), export.path)
    written.append(export.path)
    fp32 = export.path
    onnx_name, plan_name = _artifact_plan(config)
    prepared = out_dir / onnx_name if onnx_name else None
    if prepared is not None:
        _prepare(config, fp32, prepared, calibration_windows)
        written.append(prepared)
    final = prepared or fp32
    if plan_name is not None and not config.graph_only:
        from engines.build.tensorrt_build import build_plan

        final = out_dir / plan_name
        build_plan(prepared or fp32, final, config.trt)
        written.append(final)

    reference = TorchEngine(module, num_labels=export.num_labels)
    vocab = vocab_size_of(module)
    parity: dict[str, ParityReport] = {}
    vs_onnx: dict[str, ParityReport] = {}
    vs_source: dict[str, ParityReport] = {}
    fp32_engine = source_engine = None
    source_windows = 0  # windows a call of the source graph in the parity runs
    for path in written:
        engine = _open(path)
        try:
            if parity_windows is not None:
                report = parity_on_windows(
                    reference.infer, engine.infer, parity_windows, batch_size=config.parity_batch_size
                )
                if path != fp32:
                    fp32_engine = fp32_engine or _open(fp32)
                    vs_onnx[path.name] = parity_on_windows(
                        fp32_engine.infer, engine.infer, parity_windows,
                        batch_size=config.parity_batch_size,
                    )
                if source_graph is not None:
                    if source_engine is None:
                        source_engine = _open_source(source_graph)
                        # a graph that quantizes activations over its batch runs one window a call,
                        # as the server runs it: its labels then depend on the window alone
                        source_windows = config.parity_batch_size if source_engine.rows_independent else 1
                    vs_source[path.name] = parity_on_windows(
                        source_engine.infer, engine.infer, parity_windows,
                        batch_size=config.parity_batch_size, reference_batch_size=source_windows,
                    )
            else:
                report = _random_parity(reference.infer, engine, vocab)
        finally:
            engine.close()
        parity[path.name] = report
        sidecar = read_sidecar(path)
        entry = {"reference": "torch", "data": parity_source or "random token ids", **report.to_dict()}
        if path.name in vs_onnx:
            entry["label_agreement_vs_onnx_fp32"] = vs_onnx[path.name].label_agreement
        if path.name in vs_source:
            assert source_graph is not None
            entry["source_graph"] = source_graph.name
            entry["label_agreement_vs_source_graph"] = vs_source[path.name].label_agreement
            entry["source_graph_windows_a_call"] = source_windows
        write_sidecar(sidecar.replace(parity=entry), path)
    for opened in (fp32_engine, source_engine):
        if opened is not None:
            opened.close()
    reference.close()

    for name, source in (copy_files or {}).items():
        shutil.copyfile(source, out_dir / name)
        written.append(out_dir / name)
    meta = {**model_metadata, "artifact": final.name}
    if (out_dir / TOKENIZER_FILE).is_file():  # loading checks it: a swapped tokenizer mislabels silently
        meta["tokenizer_sha256"] = tokenizer_sha256(out_dir)
    written.append(write_model_meta(out_dir, meta))
    return BuildReport(
        out_dir, final, tuple(written), export, parity, vs_onnx,
        parity_source or "random token ids", vs_source, source_graph, source_windows,
    )
