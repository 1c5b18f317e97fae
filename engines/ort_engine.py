"""ONNX Runtime engine (CPU by default): fp32, fp16 or int8 ONNX artifacts.

One InferenceSession per engine with explicit providers and thread counts.
``InferenceSession.run`` is thread-safe, so ``infer`` may be called from any
thread; the service calls it from its single inference worker anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import (
    CASE_OUTPUT_NAME,
    INPUT_NAMES,
    OUTPUT_NAME,
    ArtifactError,
    ArtifactMismatch,
    EngineBase,
    EngineError,
    HeadLogits,
    InferenceError,
    IOSpec,
    StreamEngineBase,
    check_batch,
    make_options,
)
from engines.deps import require
from engines.host import check_threads, usable_cores
from engines.model_meta import has_model_meta, read_model_meta
from engines.sidecar import Sidecar, read_sidecar, verify_artifact
from engines.stream_spec import cache_shape, stream_interface_problems

logger = logging.getLogger(__name__)

_ORT_TYPES = {"tensor(int64)": "int64", "tensor(float)": "float32", "tensor(float16)": "float16"}
_OPT_LEVELS = ("disable", "basic", "extended", "all")


def physical_cores() -> int:
    """Physical cores this process may use (SMT siblings counted once)."""
    allowed = usable_cores()
    cores: set[tuple[str, str]] = set()
    try:
        physical = core = ""
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "physical id":
                    physical = value
                elif key == "core id":
                    core = value
                elif not key and core:
                    cores.add((physical, core))
                    physical = core = ""
        if core:
            cores.add((physical, core))
    except OSError:
        pass
    return max(1, min(allowed, len(cores) or allowed))


@dataclass(frozen=True)
class OrtOptions:
    """Session settings.

    Attributes:
        intra_op_threads: threads inside one operator; None means the number of
            physical cores.
        inter_op_threads: threads across operators (sequential execution: 1).
        providers: execution providers in priority order, given explicitly.
        graph_optimization: ``disable``, ``basic``, ``extended`` or ``all``.
        allow_spinning: let intra-op threads busy-wait for work (ORT's own
            default). Off here: the service shares its cores with the event
            loop, where spinning halved throughput (docs/engines.md). Turn it
            on for a dedicated inference host.
        verify_checksum: compare the artifact's sha256 with its sidecar on load.
        cpu_mem_arena: ONNX Runtime's CPU memory arena (ORT's own default):
            buffers are kept and reused across runs, and the arena grows to the
            largest batch shapes seen and never shrinks. Off here: with the
            server's varying batches it grew for the whole of a soak, at no
            measurable speed cost (docs/engines.md).
        mem_pattern: ONNX Runtime's memory patterns (ORT's own default): the
            allocation plan of every set of input shapes run is kept for the
            next run of the same shapes. Off here: streaming calls come in
            thousands of shapes (rows x new tokens x cached tokens), and the
            plans piled up in a long-running server, at no measurable speed
            cost without them (docs/engines.md).
    """

    intra_op_threads: int | None = None
    inter_op_threads: int = 1
    providers: tuple[str, ...] = ("CPUExecutionProvider",)
    graph_optimization: str = "all"
    allow_spinning: bool = False
    verify_checksum: bool = True
    cpu_mem_arena: bool = False
    mem_pattern: bool = False

    def __post_init__(self) -> None:
        check_threads("intra_op_threads", self.intra_op_threads)
        check_threads("inter_op_threads", self.inter_op_threads)
        if not self.providers:
            raise EngineError("providers must name at least one execution provider")
        if self.graph_optimization not in _OPT_LEVELS:
            raise EngineError(f"graph_optimization must be one of {_OPT_LEVELS}")


class OrtEngine(EngineBase):
    """An ONNX artifact and its sidecar, run with ONNX Runtime.

    Attributes:
        name: ``"onnxruntime"``.
        path: the artifact.
        sidecar: its parsed sidecar.
        options: the session settings used.
        rows_independent: False for graphs that quantize activations with
            batch-wide dynamic scales (:meth:`Sidecar.quantizes_activations`).
    """

    name = "onnxruntime"

    def __init__(self, path: str | Path, options: OrtOptions | None = None) -> None:
        ort = require("onnxruntime", feature="the onnxruntime engine")
        self.options = options or OrtOptions()
        self.path = Path(path)
        if not self.path.is_file():
            raise ArtifactError(f"no ONNX artifact at {self.path}")
        self.sidecar: Sidecar = read_sidecar(self.path)
        if self.options.verify_checksum:
            verify_artifact(self.path, self.sidecar)
        available = ort.get_available_providers()
        missing = [p for p in self.options.providers if p not in available]
        if missing:
            raise EngineError(
                f"execution providers {missing} are not available in this onnxruntime "
                f"build (available: {available})"
            )
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.options.intra_op_threads or physical_cores()
        so.inter_op_num_threads = self.options.inter_op_threads
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.enable_cpu_mem_arena = self.options.cpu_mem_arena
        so.enable_mem_pattern = self.options.mem_pattern
        so.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[self.options.graph_optimization]
        so.add_session_config_entry(
            "session.intra_op.allow_spinning", "1" if self.options.allow_spinning else "0"
        )
        self.threads = so.intra_op_num_threads
        try:
            self._session = ort.InferenceSession(
                str(self.path), sess_options=so, providers=list(self.options.providers)
            )
        except Exception as e:  # onnxruntime raises its own unrelated exception types
            raise ArtifactError(f"onnxruntime cannot load {self.path}: {e}") from e
        self._check_interface()
        self.rows_independent = not self.sidecar.quantizes_activations()
        logger.info(
            "loaded %s (%s, %d threads, %s)",
            self.path, self.sidecar.precision, self.threads, ",".join(self.options.providers),
        )

    def _check_interface(self) -> None:
        inputs = {i.name: _ORT_TYPES.get(i.type, i.type) for i in self._session.get_inputs()}
        outputs = {o.name: _ORT_TYPES.get(o.type, o.type) for o in self._session.get_outputs()}
        expected_in = {t.name: t.dtype for t in self.sidecar.inputs}
        expected_out = {t.name: t.dtype for t in self.sidecar.outputs}
        if inputs != expected_in or outputs != expected_out:
            raise ArtifactMismatch(
                f"{self.path} has inputs {inputs} and outputs {outputs}, but its sidecar "
                f"says {expected_in} and {expected_out}"
            )
        if sorted(inputs) != sorted(INPUT_NAMES) or OUTPUT_NAME not in outputs:
            raise ArtifactMismatch(
                f"{self.path} must take {list(INPUT_NAMES)} and return {OUTPUT_NAME!r}; "
                f"it takes {list(inputs)} and returns {list(outputs)}"
            )

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """int64[B,T], int64[B,T] -> float32[B,T,C]."""
        ids, mask = check_batch(input_ids, attention_mask)
        if self._session is None:
            raise InferenceError(f"engine for {self.path.name} is closed")
        try:
            (logits,) = self._session.run(
                [OUTPUT_NAME], {"input_ids": ids, "attention_mask": mask}
            )
        except Exception as e:  # onnxruntime's own exception types
            raise InferenceError(f"onnxruntime failed on a batch of shape {ids.shape}: {e}") from e
        return np.asarray(logits, dtype=np.float32)

    @property
    def has_case(self) -> bool:
        """The graph also outputs case logits (a model with a truecasing head)."""
        return self._session is not None and CASE_OUTPUT_NAME in {o.name for o in self._session.get_outputs()}

    def infer_heads(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> HeadLogits:
        """int64[B,T], int64[B,T] -> punctuation logits float32[B,T,C] and case logits
        float32[B,T,4] (None when the graph has no case head), from one run."""
        if not self.has_case:
            return HeadLogits(self.infer(input_ids, attention_mask), None)
        ids, mask = check_batch(input_ids, attention_mask)
        try:
            logits, case = self._session.run(
                [OUTPUT_NAME, CASE_OUTPUT_NAME], {"input_ids": ids, "attention_mask": mask}
            )
        except Exception as e:  # onnxruntime's own exception types
            raise InferenceError(f"onnxruntime failed on a batch of shape {ids.shape}: {e}") from e
        return HeadLogits(np.asarray(logits, dtype=np.float32), np.asarray(case, dtype=np.float32))

    def io_spec(self) -> IOSpec:
        return self.sidecar.io_spec()

    def close(self) -> None:
        """Drop the session (ONNX Runtime frees it with the last reference)."""
        self._session = None


class OrtStreamEngine(OrtEngine, StreamEngineBase):
    """The streaming graph (:mod:`engines.stream_spec`) of a model folder, run with ONNX Runtime
    (a :class:`engines.base.StreamEngine`).

    :meth:`infer_stream` runs new tokens against cached keys/values; ``infer``
    and ``infer_heads`` run whole windows (no cache, positions 0..T-1), which
    is the shipped graph's computation, so one engine serves a streaming
    server's final and partial windows alike.

    Attributes:
        stream_shape: (layers, heads, head_dim) of the cached keys/values.
        cache_tokens: cached tokens per stream the model folder asks for
            (``stream_cache_tokens`` in its ``streampunct.json``); None: the
            streaming window's left context.
    """

    def __init__(self, path: str | Path, options: OrtOptions | None = None, *,
                 cache_tokens: int | None = None) -> None:
        if cache_tokens is not None and cache_tokens < 1:
            raise EngineError(f"cache_tokens must be >= 1, got {cache_tokens}")
        self.cache_tokens = cache_tokens
        super().__init__(path, options)

    def _check_interface(self) -> None:
        inputs = {i.name: _ORT_TYPES.get(i.type, i.type) for i in self._session.get_inputs()}
        expected_in = {t.name: t.dtype for t in self.sidecar.inputs}
        if inputs != expected_in:
            raise ArtifactMismatch(f"{self.path} has inputs {inputs}, but its sidecar says {expected_in}")
        problems = stream_interface_problems(self.sidecar.inputs, self.sidecar.outputs)
        if problems:
            raise ArtifactMismatch(f"{self.path} is not a streaming graph: " + "; ".join(problems))
        self.stream_shape = cache_shape(self.sidecar.inputs)
        self._outputs = [t.name for t in self.sidecar.outputs]

    @property
    def has_case(self) -> bool:
        return self._session is not None and CASE_OUTPUT_NAME in self._outputs

    def infer_stream(self, inputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The graph's inputs (``streampunct.core.stream_cache.pad_stream_calls``) -> (logits
        float32[B, T, C], the case logits appended when the graph has them; present_kv)."""
        if self._session is None:
            raise InferenceError(f"engine for {self.path.name} is closed")
        try:
            outs = self._session.run(self._outputs, dict(inputs))
        except Exception as e:  # onnxruntime's own exception types
            shape = inputs["input_ids"].shape
            raise InferenceError(f"onnxruntime failed on a streaming batch of shape {shape}: {e}") from e
        logits = np.concatenate(outs[:-1], axis=-1) if len(outs) > 2 else outs[0]
        return np.asarray(logits, dtype=np.float32), outs[-1]

    def _whole(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> list[np.ndarray]:
        ids, mask = check_batch(input_ids, attention_mask)
        if self._session is None:
            raise InferenceError(f"engine for {self.path.name} is closed")
        layers, heads, head_dim = self.stream_shape
        b, t = ids.shape
        feed = {"input_ids": ids, "position_ids": np.tile(np.arange(t, dtype=np.int64), (b, 1)),
                "attention_mask": mask, "past_kv": np.zeros((layers, 2, b, heads, 0, head_dim), np.float16)}
        try:
            return self._session.run(self._outputs[:-1], feed)
        except Exception as e:  # onnxruntime's own exception types
            raise InferenceError(f"onnxruntime failed on a batch of shape {ids.shape}: {e}") from e

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        return np.asarray(self._whole(input_ids, attention_mask)[0], dtype=np.float32)

    def infer_heads(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> HeadLogits:
        outs = self._whole(input_ids, attention_mask)
        return HeadLogits(np.asarray(outs[0], dtype=np.float32),
                          np.asarray(outs[1], dtype=np.float32) if len(outs) > 1 else None)


def open_stream_engine(model_dir: str | Path, options: Mapping[str, Any] | None = None) -> OrtStreamEngine:
    """The streaming engine of a model folder (its ``streampunct.json`` names ``stream_artifact``;
    its ``stream_cache_tokens`` is the engine's ``cache_tokens``)."""
    model_dir = Path(model_dir)
    meta = read_model_meta(model_dir)
    if not meta.stream_artifact:
        raise ArtifactError(f"{model_dir} has no streaming graph (no stream_artifact in streampunct.json)")
    return OrtStreamEngine(model_dir / meta.stream_artifact,
                           make_options(OrtOptions, dict(options or {}), "onnxruntime"),
                           cache_tokens=meta.stream_cache_tokens)


def open_engine(model_dir: Path, artifact: Path | None, options: Mapping[str, Any]) -> OrtEngine:
    """Registry entry point: ``load_engine("onnxruntime", model_dir, **options)``."""
    if artifact is None:
        raise ArtifactError(f"the onnxruntime backend needs an artifact in {model_dir}")
    sidecar = read_sidecar(artifact)
    if not stream_interface_problems(sidecar.inputs, sidecar.outputs):
        # a folder whose one graph is the streaming graph (models/base): it runs whole windows too
        tokens = read_model_meta(model_dir).stream_cache_tokens if has_model_meta(model_dir) else None
        return OrtStreamEngine(artifact, make_options(OrtOptions, options, "onnxruntime"), cache_tokens=tokens)
    return OrtEngine(artifact, make_options(OrtOptions, options, "onnxruntime"))
