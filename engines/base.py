"""The Engine protocol, its IO description and the engines' exception tree.

Every backend (ONNX Runtime, TensorRT, torch, the fake) implements :class:`Engine`:
``infer(input_ids int64[B,T], attention_mask int64[B,T]) -> logits float32[B,T,C]``,
``infer_heads`` (the same run's punctuation and case logits, a :class:`HeadLogits`),
``io_spec`` and ``close``, and declares its capabilities as attributes:

``name``
    the backend's name (``onnxruntime``, ``tensorrt``, ``torch``, ``fake``).
``has_case``
    the model has a truecasing head: ``infer_heads`` returns its case logits.
``rows_independent``
    a row's logits depend on that row only, not on the rest of its batch or the
    padding (False for int8 graphs with dynamic activation quantization).

An engine that runs the streaming graph (cached left context,
:mod:`engines.stream_spec`) is a :class:`StreamEngine`: it also declares
``stream_shape`` and ``cache_tokens`` and has ``infer_stream``. Engines
inherit the defaults from :class:`EngineBase` (streaming engines from
:class:`StreamEngineBase`); everything is set when the engine is built, and the
runtime reads these attributes as they are (no ``getattr`` probing): an engine,
or a test double, declares them or inherits them. Nothing here imports a
backend, so the protocol costs only numpy to import.

Exception tree (``engines`` imports neither ``streampunct`` nor ``training``,
so it has its own root; the CLI turns these into its own errors)::

    EngineError
    ├── DependencyMissing   an optional package is not installed; names the pip extra
    ├── ArtifactError       a model folder, artifact or sidecar is missing or malformed
    │   └── ArtifactMismatch  an artifact does not fit this runtime (GPU, TensorRT
    │                         version, IO names) or its sidecar
    ├── ExportError         ONNX export or its verification failed
    ├── GraphPrepError      fp16 / Q/DQ graph preparation failed its checks
    ├── BuildError          a TensorRT build step returned an error status
    └── InferenceError      running a batch failed (bad input shapes, runtime errors)
        └── CudaError       a CUDA driver call failed (see engines.cuda_ops)
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

#: The model's tensor names; every artifact has exactly these.
INPUT_NAMES: tuple[str, str] = ("input_ids", "attention_mask")
OUTPUT_NAME = "logits"
#: The optional second output: per-token case logits (lower, Capitalized, ALL CAPS, MiXed)
#: of a model with a truecasing head.
CASE_OUTPUT_NAME = "case_logits"
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8", "int4")


class EngineError(Exception):
    """Root of every error the engines package raises on purpose."""


class DependencyMissing(EngineError, ImportError):
    """An optional dependency is missing; the message says what to pip install."""


class ArtifactError(EngineError):
    """A model folder, artifact or sidecar is missing or malformed."""


class ArtifactMismatch(ArtifactError):
    """An artifact does not fit its sidecar or this runtime (GPU, TensorRT version)."""


class ExportError(EngineError):
    """ONNX export failed, or the exported graph failed its checks."""


class GraphPrepError(EngineError):
    """The fp16 or Q/DQ graph preparation produced a graph that fails its checks."""


class BuildError(EngineError):
    """A TensorRT build step failed (parser errors, invalid profile, no plan)."""


class InferenceError(EngineError):
    """Running a batch failed: bad input shapes or dtypes, or a runtime error."""


class CudaError(InferenceError):
    """A CUDA driver call failed."""


class LoadCancelled(EngineError):
    """An engine's load was given up: its owner shut down while it waited (:func:`load_cancel`)."""


_load = threading.local()


@contextlib.contextmanager
def cancellable_load(cancel: threading.Event) -> typing.Iterator[None]:
    """Engines built in this thread within the block give their load up (:class:`LoadCancelled`)
    when ``cancel`` is set while they wait, e.g. for a remote server to become ready, so that
    an owner that shuts down (the server's Ctrl-C) is not held by the wait."""
    previous = getattr(_load, "cancel", None)
    _load.cancel = cancel
    try:
        yield
    finally:
        _load.cancel = previous


def load_cancel() -> threading.Event:
    """The event that cancels loads in this thread (:func:`cancellable_load`); one never set
    outside such a block. An engine that waits while it loads waits on it, not in sleeps."""
    cancel = getattr(_load, "cancel", None)
    return cancel if cancel is not None else threading.Event()


@dataclass(frozen=True)
class TensorSpec:
    """One model input or output.

    Attributes:
        name: tensor name in the graph (``input_ids``, ``attention_mask``, ``logits``).
        dtype: numpy dtype name (``int64``, ``float32``).
        shape: dimensions; a string is a symbolic (dynamic) axis such as ``"batch"``.
    """

    name: str
    dtype: str
    shape: tuple[int | str, ...]

    def to_dict(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_dict(cls, d: dict) -> TensorSpec:
        return cls(name=str(d["name"]), dtype=str(d["dtype"]), shape=tuple(d["shape"]))


@dataclass(frozen=True)
class IOSpec:
    """What an engine takes and returns.

    Labels, label position and window belong to the model, not to an
    artifact: they live in the model folder's ``streampunct.json``, which the
    runtime reads (``streampunct.model.load_model_info``).

    Attributes:
        backend: ``onnxruntime``, ``tensorrt`` or ``torch``.
        artifact: file name of the loaded artifact (empty for torch).
        precision: ``fp32``, ``fp16`` or ``int8``.
        inputs, outputs: tensor descriptions (names, dtypes, symbolic shapes).
        max_batch, max_len: hard limits of the engine (TensorRT profile), or
            None where any shape works.
        min_len: shortest sequence the engine runs natively (shorter input is
            padded inside the engine), or None.
    """

    backend: str
    artifact: str
    precision: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch: int | None = None
    max_len: int | None = None
    min_len: int | None = None

    @property
    def num_labels(self) -> int | None:
        """C, the logits' last axis (None where the artifact leaves it symbolic)."""
        last = self.outputs[0].shape[-1]
        return last if isinstance(last, int) else None


class HeadLogits(NamedTuple):
    """One run's outputs: ``punctuation`` float32[B,T,C] and ``case`` float32[B,T,4]
    (None without a truecasing head). A tuple: ``logits, case = engine.infer_heads(...)``.
    The runtime passes one window's rows the same way (float32[T,C] and [T,4]), from the
    engine to the stream's core (``streampunct.core.engine_call``)."""

    punctuation: np.ndarray
    case: np.ndarray | None


@runtime_checkable
class Engine(Protocol):
    """A loaded model that maps token ids to per-token logits (module doc).

    ``infer`` may be called from any thread; implementations serialize or
    parallelize internally. ``close`` releases native resources and is
    idempotent.

    Attributes:
        name: the backend's name.
        has_case: ``infer_heads`` returns case logits (a truecasing head).
        rows_independent: whether a row's logits depend only on that row, not
            on the other rows of its batch or the padding. False for int8 ONNX
            graphs with dynamic activation quantization, whose scales are
            computed over the whole input tensor; the server's batcher then
            runs each window alone when told to (``serve --batch-rows exact``,
            :mod:`streampunct.server.batcher`).
    """

    name: str
    has_case: bool
    rows_independent: bool

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """int64[B,T], int64[B,T] -> float32[B,T,C]."""
        ...

    def infer_heads(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> HeadLogits:
        """Punctuation and case logits of one run (case None without a case head)."""
        ...

    def io_spec(self) -> IOSpec: ...

    def close(self) -> None: ...


@runtime_checkable
class StreamEngine(Engine, Protocol):
    """An engine of the streaming graph (:mod:`engines.stream_spec`): whole windows through
    ``infer``/``infer_heads`` (no cache, positions 0..T-1), new tokens against cached
    keys/values through ``infer_stream``.

    Attributes:
        stream_shape: (layers, heads, head_dim) of the cached keys/values.
        cache_tokens: cached tokens per stream the model folder asks for (its
            ``stream_cache_tokens``), given when the engine is built; None: the
            streaming window's left context.
    """

    stream_shape: tuple[int, int, int]
    cache_tokens: int | None

    def infer_stream(self, inputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The streaming graph's inputs (``streampunct.core.stream_cache.pad_stream_calls``) ->
        (logits float32[B, T, C], with the case logits appended when the model has them;
        present_kv float16[L, 2, B, heads, T, head_dim])."""
        ...


class EngineBase:
    """The declared capabilities' defaults, for engines to inherit: no case head, rows
    independent, ``infer_heads`` from ``infer``, nothing to close."""

    name: str = ""
    has_case: bool = False
    rows_independent: bool = True

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def infer_heads(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> HeadLogits:
        return HeadLogits(self.infer(input_ids, attention_mask), None)

    def close(self) -> None:
        pass


class StreamEngineBase(EngineBase):
    """:class:`EngineBase` for engines of the streaming graph (a :class:`StreamEngine`):
    ``cache_tokens`` defaults to None (the streaming window's left context); the engine
    sets ``stream_shape`` when it is built and implements ``infer_stream``."""

    stream_shape: tuple[int, int, int]
    cache_tokens: int | None = None

    def infer_stream(self, inputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError


def check_batch(
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    *,
    max_batch: int | None = None,
    max_len: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Validate one batch and return both arrays as C-contiguous int64.

    Raises InferenceError with the offending shape or dtype.
    """
    ids = np.asarray(input_ids)
    mask = np.asarray(attention_mask)
    if ids.ndim != 2 or ids.shape[0] < 1 or ids.shape[1] < 1:
        raise InferenceError(f"input_ids must have shape [batch, seq] with both >= 1, got {ids.shape}")
    if mask.shape != ids.shape:
        raise InferenceError(
            f"attention_mask shape {mask.shape} differs from input_ids shape {ids.shape}"
        )
    for name, arr in (("input_ids", ids), ("attention_mask", mask)):
        if not np.issubdtype(arr.dtype, np.integer):
            raise InferenceError(f"{name} must be an integer array, got {arr.dtype}")
    batch, seq = ids.shape
    if max_batch is not None and batch > max_batch:
        raise InferenceError(f"batch {batch} exceeds this engine's max_batch {max_batch}")
    if max_len is not None and seq > max_len:
        raise InferenceError(f"sequence length {seq} exceeds this engine's max_len {max_len}")
    return (
        np.ascontiguousarray(ids, dtype=np.int64),
        np.ascontiguousarray(mask, dtype=np.int64),
    )


# --- backend options: each backend's settings are a frozen dataclass built by make_options ---

#: What a value of an option's type is called in messages.
_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", tuple: "a list"}


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the annotated type ``hint`` (types the options use; others pass)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    kind = typing.get_origin(hint) or hint
    if kind is type(None):
        return value is None
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is tuple:
        return isinstance(value, tuple | list)
    return isinstance(value, kind) if kind in _TYPE_NAMES else True


def _type_name(hint: Any) -> str:
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    kinds = [typing.get_origin(a) or a for a in args if a is not type(None)]
    return " or ".join(_TYPE_NAMES.get(k, getattr(k, "__name__", str(k))) for k in kinds)


class OptionText(str):
    """An option's value as text (``--engine-option KEY=VALUE``): :func:`make_options` converts it
    to the option's type (a string stays a string, a list splits on commas, numbers and
    true/false are parsed), which only the backend's options dataclass knows."""


_FALSE_TRUE = ("false", "true")


def _scalar_from_text(text: str, kind: Any) -> Any:
    """``text`` as a value of ``kind`` (bool, int, float or str); ValueError when it is not one."""
    if kind is bool:
        if text.strip().lower() not in _FALSE_TRUE:
            raise ValueError(text)
        return text.strip().lower() == "true"
    if kind is int:
        return int(text)
    if kind is float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(text)
        return value
    return str(text)


def _from_text(text: str, hint: Any) -> Any:
    """``text`` converted to the annotated type ``hint``; ValueError when it is none of its types.
    ``none`` is None where the type allows None and no string."""
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    kinds = [typing.get_origin(a) or a for a in args]
    if type(None) in kinds and str not in kinds and text.strip().lower() == "none":
        return None
    for arg, kind in zip(args, kinds, strict=True):
        if kind is tuple:
            item = next((a for a in typing.get_args(arg) if a is not Ellipsis), str)
            return tuple(_scalar_from_text(part.strip(), item) for part in text.split(",") if part.strip())
        if kind in (bool, int, float, str):
            try:
                return _scalar_from_text(text, kind)
            except ValueError:
                continue
    if any(kind in _TYPE_NAMES for kind in kinds):
        raise ValueError(text)
    return str(text)  # a type the options do not convert: the dataclass takes the text


def make_options(cls: type, options: Mapping[str, Any], backend: str) -> Any:
    """Build a backend's frozen options dataclass, naming unknown options and mistyped values.
    :class:`OptionText` values (the command line's) are converted to their option's type first."""
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise EngineError(
            f"unknown option(s) {', '.join(unknown)} for the {backend} backend; "
            f"valid: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(cls)
    options = dict(options)
    for name, value in options.items():
        if isinstance(value, OptionText):
            try:
                options[name] = _from_text(value, hints[name])
            except ValueError:
                raise EngineError(f"option {name} of the {backend} backend must be {_type_name(hints[name])}, "
                                  f"got {str(value)!r}") from None
    for name, value in options.items():
        if not _fits(value, hints[name]):
            raise EngineError(f"option {name} of the {backend} backend must be {_type_name(hints[name])}, "
                              f"got {value!r}")
    values = dict(options)
    if "providers" in values and isinstance(values["providers"], list):
        values["providers"] = tuple(values["providers"])
    return cls(**values)
