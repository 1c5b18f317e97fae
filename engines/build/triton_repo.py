"""A Triton Inference Server model repository for a model folder (``build-engine --triton-repo``).

Layout written (``NAME`` defaults to ``streampunct``)::

    DIR/
      NAME/                   ONNX Runtime (platform "onnxruntime_onnx"), CPU or GPU instances
        config.pbtxt
        1/model.onnx          the folder's whole-window graph
      NAME_trt/               TensorRT (platform "tensorrt_plan"), GPU instances
        config.pbtxt
        1/model.plan          the folder's plan when it has one (built on the GPU host otherwise)

Both entries take ``input_ids`` and ``attention_mask`` int64 [batch, sequence] and return
``logits`` (and ``case_logits`` for a model with a truecasing head) float32 [batch, sequence, 4],
with the batch axis left to Triton (``max_batch_size``) and the dynamic batcher in front: Triton
merges requests of the same sequence length, from any number of front ends, into one run.

Whole windows only. A folder whose one graph is the streaming graph (``models/base``:
``input_ids, position_ids, attention_mask, past_kv``, batch on ``past_kv``'s third axis)
gets a derived graph with the whole-window interface: the positions are ``0..T-1`` and
the cache is empty, computed inside the graph, which is the shipped computation
(``engines.ort_engine.OrtStreamEngine.infer``); ``present_kv`` is dropped.

Every entry carries ``parameters`` that the ``triton`` engine backend
(:mod:`engines.triton_engine`) reads: ``streampunct_source_sha256`` (the checkpoint
the graph was built from, checked against the front end's model folder),
``streampunct_precision``, ``streampunct_rows_independent`` (false for dynamic int8
graphs: their activation scales span the batch that Triton forms) and, for the TensorRT
entry, ``streampunct_min_len`` (the profile's shortest sequence: the client pads up to it;
without a plan yet, build-engine's default profile's, as the precision is its default's).
Triton's backends ignore parameters they do not know.

The text follows Triton's ``ModelConfig`` protobuf schema (``model_config.proto``;
``tritonclient.grpc.model_config_pb2`` parses it, which the tests do).
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from engines.base import (
    CASE_OUTPUT_NAME,
    INPUT_NAMES,
    OUTPUT_NAME,
    ArtifactError,
    EngineError,
    TensorSpec,
)
from engines.sidecar import Sidecar, read_sidecar
from engines.stream_spec import stream_interface_problems

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "streampunct"
INSTANCE_KINDS = ("cpu", "gpu")
#: Triton's data types of the numpy dtypes the graphs use.
_TRITON_TYPES = {"int64": "TYPE_INT64", "float32": "TYPE_FP32", "float16": "TYPE_FP16", "int32": "TYPE_INT32"}


@dataclass(frozen=True)
class TritonRepoConfig:
    """What to write.

    Attributes:
        model_name: the ONNX Runtime entry's name; the TensorRT entry is ``<name>_trt``.
        kind: ``cpu`` or ``gpu``: the ONNX Runtime entry's instance group (KIND_CPU / KIND_GPU).
        instances: model instances (per GPU for ``gpu``): runs Triton makes side by side.
        gpus: GPU ids of the GPU instance groups (empty: every GPU Triton sees).
        max_batch: Triton's ``max_batch_size`` of the ONNX Runtime entry (rows per run).
        max_queue_delay_us: longest a request waits in the dynamic batcher for others.
        intra_op_threads: ONNX Runtime's threads per CPU instance (None: the backend's
            default, every core).
        plan: also write the TensorRT entry.
        plan_max_batch: its ``max_batch_size`` when the folder has no plan yet (the plan
            is then built with ``build-engine --backend tensorrt --max-batch`` this value);
            a plan's own profile decides otherwise.
    """

    model_name: str = DEFAULT_MODEL_NAME
    kind: str = "cpu"
    instances: int = 1
    gpus: tuple[int, ...] = ()
    max_batch: int = 64
    max_queue_delay_us: int = 1000
    intra_op_threads: int | None = None
    plan: bool = True
    plan_max_batch: int = 32

    def __post_init__(self) -> None:
        if not self.model_name or not all(c.isalnum() or c in "._-" for c in self.model_name):
            raise EngineError(f"model name {self.model_name!r}: letters, digits, '.', '_' and '-' only")
        if self.model_name.startswith("."):
            raise EngineError(f"model name {self.model_name!r} starts with '.': name a folder inside the "
                              "repository (e.g. streampunct)")
        if self.kind not in INSTANCE_KINDS:
            raise EngineError(f"kind must be one of {', '.join(INSTANCE_KINDS)}, not {self.kind!r}")
        for name in ("instances", "max_batch", "plan_max_batch"):
            if getattr(self, name) < 1:
                raise EngineError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_queue_delay_us < 0:
            raise EngineError("max_queue_delay_us must be >= 0")
        if self.intra_op_threads is not None and self.intra_op_threads < 1:
            raise EngineError(f"intra_op_threads must be >= 1, got {self.intra_op_threads}")

    @property
    def plan_name(self) -> str:
        return f"{self.model_name}_trt"


@dataclass(frozen=True)
class TritonRepo:
    """What :func:`write_triton_repo` wrote.

    Attributes:
        root: the repository.
        onnx_source: the folder's graph the ONNX Runtime entry serves.
        derived: the entry's graph was derived from a streaming graph (whole windows).
        plan_source: the plan copied into the TensorRT entry (None: none yet, or no entry).
        written: files written, in order.
        notes: what the user still has to do (a plan to build), one line each.
    """

    root: Path
    onnx_source: Path
    derived: bool
    plan_source: Path | None
    written: tuple[Path, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def summary_lines(self) -> list[str]:
        lines = [f"wrote the Triton model repository {self.root}/"]
        for path in self.written:
            lines.append(f"  {path.relative_to(self.root)!s:<32} {path.stat().st_size / 1e6:9.2f} MB")
        how = "whole-window graph derived from the streaming graph " if self.derived else ""
        lines.append(f"ONNX Runtime entry: {how}{self.onnx_source}")
        lines.extend(self.notes)
        return lines


def _tensor_block(kind: str, specs: tuple[TensorSpec, ...]) -> str:
    """``input [...]`` / ``output [...]`` with the batch axis left to Triton (``max_batch_size``)."""
    items = []
    for spec in specs:
        dtype = _TRITON_TYPES.get(spec.dtype)
        if dtype is None:
            raise ArtifactError(f"{kind} {spec.name} is {spec.dtype}, which the repository writer does not map")
        dims = [d if isinstance(d, int) else -1 for d in spec.shape[1:]]
        items.append(f'  {{\n    name: "{spec.name}"\n    data_type: {dtype}\n    dims: [ {", ".join(map(str, dims))} ]\n  }}')
    return f"{kind} [\n" + ",\n".join(items) + "\n]\n"


def _parameters(values: dict[str, str]) -> str:
    return "".join(f'parameters {{\n  key: "{k}"\n  value: {{ string_value: "{v}" }}\n}}\n' for k, v in values.items())


def _instance_group(kind: str, count: int, gpus: tuple[int, ...]) -> str:
    gpu_line = f"\n    gpus: [ {', '.join(map(str, gpus))} ]" if gpus and kind == "KIND_GPU" else ""
    return f"instance_group [\n  {{\n    count: {count}\n    kind: {kind}{gpu_line}\n  }}\n]\n"


def _whole_window_io(sidecar: Sidecar) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """The entry's interface: ``input_ids``/``attention_mask`` [batch, sequence], then
    ``logits`` (and ``case_logits``) [batch, sequence, C]."""
    inputs = tuple(TensorSpec(name, "int64", ("batch", "sequence")) for name in INPUT_NAMES)
    outputs = tuple(TensorSpec(t.name, "float32", ("batch", "sequence", t.shape[-1]))
                    for t in sidecar.outputs if t.name in (OUTPUT_NAME, CASE_OUTPUT_NAME))
    if not outputs or outputs[0].name != OUTPUT_NAME:
        raise ArtifactError(f"{sidecar.artifact} has no {OUTPUT_NAME!r} output")
    return inputs, outputs


def onnx_config(config: TritonRepoConfig, sidecar: Sidecar) -> str:
    """``config.pbtxt`` of the ONNX Runtime entry."""
    inputs, outputs = _whole_window_io(sidecar)
    parameters = {
        "streampunct_source_sha256": sidecar.source_sha256 or "",
        "streampunct_precision": sidecar.precision,
        "streampunct_rows_independent": "false" if sidecar.quantizes_activations() else "true",
    }
    if config.intra_op_threads is not None:
        parameters["intra_op_thread_count"] = str(config.intra_op_threads)
        parameters["inter_op_thread_count"] = "1"
    kind = "KIND_GPU" if config.kind == "gpu" else "KIND_CPU"
    return (
        f'name: "{config.model_name}"\nplatform: "onnxruntime_onnx"\n'
        f'default_model_filename: "model.onnx"\nmax_batch_size: {config.max_batch}\n'
        + _tensor_block("input", inputs) + _tensor_block("output", outputs)
        + _instance_group(kind, config.instances, config.gpus)
        + f"dynamic_batching {{\n  max_queue_delay_microseconds: {config.max_queue_delay_us}\n}}\n"
        + _parameters(parameters)
    )


def _prepared_for_tensorrt(sidecar: Sidecar) -> bool:
    """The graph is one a TensorRT build prepared (``build-engine --backend tensorrt --graph-only``):
    fp16, Q/DQ int8, or rebuilt from another folder's graph (``weights_from``)."""
    return sidecar.prepared_for_tensorrt() is not None or "weights_from" in (sidecar.recipe or {})


def default_plan_precision(sidecar: Sidecar) -> str:
    """The precision of the plan ``build-engine --backend tensorrt`` builds by default for a folder
    serving the graph of ``sidecar``: fp32 for an ONNX Runtime int8 graph, dynamic or with static
    activation scales (its activations emulated in a
    float32 graph, as ``models/default``'s ``model.fp32.plan``) or a graph emulating them, the graph's
    own for an fp16 or Q/DQ int8 graph prepared for TensorRT, fp16 otherwise (fp32, int4)."""
    weights_from = (sidecar.recipe or {}).get("weights_from") or {}
    onnxruntime_int8 = sidecar.precision == "int8" and sidecar.prepared_for_tensorrt() is None
    if onnxruntime_int8 or (sidecar.precision == "fp32" and "activations" in weights_from):
        return "fp32"
    if sidecar.precision in ("fp16", "int8"):
        return sidecar.precision
    return "fp16"


def plan_config(config: TritonRepoConfig, sidecar: Sidecar, plan: Sidecar | None) -> str:
    """``config.pbtxt`` of the TensorRT entry: the plan's profile limits when there is a plan,
    else ``plan_max_batch``, build-engine's default profile minimum and precision
    (:func:`default_plan_precision`) and the ONNX graph's interface."""
    from engines.build.tensorrt_build import TrtBuildOptions

    source = plan or sidecar
    inputs, outputs = _whole_window_io(source)
    max_batch, min_len = config.plan_max_batch, TrtBuildOptions().min_len
    if plan is not None:
        from engines.tensorrt_engine import profile_limits

        max_batch, min_len, _ = profile_limits(plan)
    parameters = {
        "streampunct_source_sha256": source.source_sha256 or "",
        "streampunct_precision": plan.precision if plan is not None else default_plan_precision(sidecar),
        "streampunct_rows_independent": "true",
    }
    if min_len is not None:
        parameters["streampunct_min_len"] = str(min_len)
    return (
        f'name: "{config.plan_name}"\nplatform: "tensorrt_plan"\n'
        f'default_model_filename: "model.plan"\nmax_batch_size: {max_batch}\n'
        + _tensor_block("input", inputs) + _tensor_block("output", outputs)
        + _instance_group("KIND_GPU", config.instances, config.gpus)
        + f"dynamic_batching {{\n  max_queue_delay_microseconds: {config.max_queue_delay_us}\n}}\n"
        + _parameters(parameters)
    )


def whole_window_graph(stream_path: str | Path, out_path: str | Path) -> Path:
    """The streaming graph at ``stream_path`` with the whole-window interface, written to
    ``out_path``: ``position_ids`` = 0..T-1 per row and ``past_kv`` empty
    ([L, 2, B, heads, 0, head_dim]) are computed inside the graph from ``input_ids``'
    shape; ``present_kv`` is no longer an output."""
    from engines.deps import require
    from engines.stream_spec import cache_shape

    onnx = require("onnx", feature="deriving a whole-window graph for Triton")
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    import numpy as np

    sidecar = read_sidecar(stream_path)
    shape = cache_shape(sidecar.inputs)
    if shape is None or stream_interface_problems(sidecar.inputs, sidecar.outputs):
        raise ArtifactError(f"{stream_path} is not a streaming graph")
    layers, heads, head_dim = shape
    model = onnx.load(str(stream_path))
    graph = model.graph
    keep = [i for i in graph.input if i.name not in ("position_ids", "past_kv")]
    computed = [i for i in graph.input if i.name in ("position_ids", "past_kv")]
    del graph.input[:]
    graph.input.extend(keep)
    # Their shapes as the inputs declared them ([batch, new], [L, 2, batch, heads, past, head_dim]):
    # ONNX Runtime's fusions (the embeddings' SkipLayerNormalization) need the symbolic shapes, and
    # with the same fusions as the streaming graph the logits are the local engine's bit for bit.
    graph.value_info.extend(computed)
    outputs = [o for o in graph.output if o.name != "present_kv"]
    del graph.output[:]
    graph.output.extend(outputs)

    def const(name: str, value) -> None:
        graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=np.int64), name))

    p = "_sp_whole_"
    const(p + "zero", 0)
    const(p + "one", 1)
    const(p + "axis0", [0])
    const(p + "lead", [layers, 2])
    const(p + "tail", [heads, 0, head_dim])
    nodes = [
        helper.make_node("Shape", ["input_ids"], [p + "shape"]),
        helper.make_node("Gather", [p + "shape", p + "one"], [p + "t"], axis=0),
        helper.make_node("Gather", [p + "shape", p + "axis0"], [p + "b"], axis=0),
        helper.make_node("Range", [p + "zero", p + "t", p + "one"], [p + "range"]),
        helper.make_node("Unsqueeze", [p + "range", p + "axis0"], [p + "row"]),
        helper.make_node("Expand", [p + "row", p + "shape"], ["position_ids"]),
        helper.make_node("Concat", [p + "lead", p + "b", p + "tail"], [p + "kv_shape"], axis=0),
        helper.make_node("ConstantOfShape", [p + "kv_shape"], ["past_kv"],
                         value=numpy_helper.from_array(np.zeros(1, dtype=np.float16))),
    ]
    for node in reversed(nodes):
        graph.node.insert(0, node)
    onnx.checker.check_model(model)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_path))
    return out_path


def _plan_of(model_dir: Path) -> Path | None:
    from engines.registry import resolve_artifact

    try:
        return resolve_artifact("tensorrt", model_dir)
    except ArtifactError:
        return None


def _fresh_entry(root: Path, name: str) -> Path:
    """``root / name``, emptied: only ever a folder directly inside ``root`` is removed."""
    entry = root / name
    if entry.resolve().parent != root.resolve():
        raise EngineError(f"Triton entry {name!r} is not a folder directly inside {root}")
    if entry.exists():
        shutil.rmtree(entry)
    return entry


def _no_plan_note(config: TritonRepoConfig, model_dir: Path, sidecar: Sidecar, target: Path) -> str:
    """How to build the plan the TensorRT entry is waiting for."""
    plan = f"model.{default_plan_precision(sidecar)}.plan"
    if _prepared_for_tensorrt(sidecar):
        how = (f"rerun the 'streampunct build-engine --backend tensorrt' command that wrote {model_dir} without "
               f"--graph-only (--max-batch {config.plan_max_batch}) and copy its {plan}")
    else:
        how = (f"build one with 'streampunct build-engine --backend tensorrt --model {model_dir} --max-batch "
               f"{config.plan_max_batch} --out DIR' and copy DIR's {plan}")
    return (f"{config.plan_name}: no plan in {model_dir} yet. On the GPU host that runs Triton (same GPU model "
            f"and TensorRT version as Triton's), {how} to {target}; until then start tritonserver with "
            f"--model-control-mode explicit --load-model {config.model_name}")


def write_triton_repo(model_dir: str | Path, out_dir: str | Path, config: TritonRepoConfig | None = None,
                      *, artifact: str | None = None) -> TritonRepo:
    """Write the repository for ``model_dir`` into ``out_dir`` (its two entries are replaced;
    anything else there is left alone). ``artifact``: the folder's ONNX graph to serve
    (default: as the onnxruntime backend chooses it)."""
    from engines.registry import resolve_artifact

    config = config or TritonRepoConfig()
    model_dir, root = Path(model_dir), Path(out_dir)
    source = resolve_artifact("onnxruntime", model_dir, artifact)
    sidecar = read_sidecar(source)
    derived = not stream_interface_problems(sidecar.inputs, sidecar.outputs)
    written: list[Path] = []
    entry = _fresh_entry(root, config.model_name)
    graph = entry / "1" / "model.onnx"
    graph.parent.mkdir(parents=True)
    if derived:
        whole_window_graph(source, graph)
    else:
        shutil.copyfile(source, graph)
    (entry / "config.pbtxt").write_text(onnx_config(config, sidecar), encoding="utf-8")
    written += [entry / "config.pbtxt", graph]
    notes: list[str] = []
    if sidecar.quantizes_activations():
        notes.append(f"note: {source.name} quantizes activations over the whole batch (dynamic int8): through "
                     "Triton's dynamic batcher a window's labels depend on the requests it is batched with; "
                     "serve an fp32, fp16 or int4 graph where labels must not depend on load")
    plan_source = None
    if config.plan:
        plan_entry = _fresh_entry(root, config.plan_name)
        (plan_entry / "1").mkdir(parents=True)
        plan_source = _plan_of(model_dir)
        plan_sidecar = read_sidecar(plan_source) if plan_source is not None else None
        (plan_entry / "config.pbtxt").write_text(plan_config(config, sidecar, plan_sidecar), encoding="utf-8")
        written.append(plan_entry / "config.pbtxt")
        if plan_source is not None:
            shutil.copyfile(plan_source, plan_entry / "1" / "model.plan")
            written.append(plan_entry / "1" / "model.plan")
        else:
            notes.append(_no_plan_note(config, model_dir, sidecar, plan_entry / "1" / "model.plan"))
    repo = TritonRepo(root, source, derived, plan_source, tuple(written), tuple(notes))
    logger.info("wrote %s", root)
    return repo
