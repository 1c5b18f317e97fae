"""Backends by name, imported lazily: ``load_engine("onnxruntime", "models/default")``.

Artifact choice in a model folder (first that applies):

1. ``artifact=`` given by the caller;
2. the ``"artifact"`` key of ``streampunct.json``, when its file type suits the
   backend (``.onnx`` for onnxruntime, ``.plan`` for tensorrt);
3. the backend's defaults in order: onnxruntime ``model.int8.onnx`` then
   ``model.onnx``; tensorrt ``model.fp16.plan``, ``model.int8.plan``, then ``model.fp32.plan``.

The torch backend (engines.torch_backend) serves the folder's ONNX graph, as
onnxruntime would choose it (but the fp32 ``model.onnx`` beside an fp16 or Q/DQ graph
prepared for TensorRT), with its weights rebuilt in torch; engines.build.torch_engine
wraps a training module as the parity reference (not a serving backend).

The ``triton`` backend (engines.triton_engine) reads no artifact either: the graph runs on a
Triton Inference Server (option ``url``), the folder gives the tokenizer and labels.

The ``fake`` backend (engines.fake) reads no artifact: its labels are a function of
the token ids, at a chosen cost (``batch_ms``, ``token_us``, ``sleep``,
``has_case``, ``fail_token``), for tests and load benchmarks of the real server.
It serves a model of its own (:func:`own_model`: a name, windows and a tokenizer),
so a server over it needs no model folder.

Every backend module exposes ``open_engine(model_dir, artifact, options) -> Engine``
(:class:`engines.base.Engine`, or :class:`engines.base.StreamEngine` for a
streaming graph) and builds its options with
:func:`engines.base.make_options`; one that serves a model of its own
(``own_model=True``) also exposes ``own_model(model_dir) -> (ModelMeta, tokenizer folder)``;
one that runs a folder's streaming graph (``streams=True``: onnxruntime, torch) also exposes
``open_stream_engine(model_dir, options) -> StreamEngine``.

The runtime (``streampunct``) reaches the backends only through this module:
:func:`load_engine` and :func:`load_stream_engine` build engines, :func:`stream_shape`
decides whether a server or a simulated stream runs with cached left context
(``--stream-cache auto|on|off``), and :func:`physical_cores` gives the cores that
onnxruntime's thread counts are shared from.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from engines.base import (
    ArtifactError,
    DependencyMissing,
    Engine,
    EngineError,
    StreamEngine,
    make_options,  # noqa: F401 (the backends' options, named here too)
)
from engines.deps import install_hint, is_installed
from engines.model_meta import ModelMeta, has_model_meta, metadata_path, read_model_meta
from engines.sidecar import read_sidecar, sidecar_path
from engines.stream_spec import cache_shape


class StreamCacheMode(StrEnum):
    """``--stream-cache`` (``serve``, ``evaluate``, ``Punctuator.load``, :func:`stream_shape`):
    cached left context ``auto`` (when the folder and the backend allow it), ``on``
    (required) or ``off``. Its values are the flag's and the configs' strings."""

    AUTO = "auto"
    ON = "on"
    OFF = "off"


class StreamModeError(ArtifactError):
    """``--stream-cache on`` cannot be met: the backend runs no streaming graph, or the model
    folder names none, or the one it names is not a streaming graph (:func:`stream_shape`)."""


@dataclass(frozen=True)
class Backend:
    """One registered backend.

    Attributes:
        name: the name users pass (``onnxruntime``, ``tensorrt``).
        module: the module that implements it; imported on first use. It
            exposes ``open_engine(model_dir, artifact, options) -> Engine``.
        requires: import names that must be installed.
        suffixes: artifact file types it loads (none: it reads no artifact).
        default_artifacts: artifact names tried in order.
        own_model: it serves a model of its own (its module's ``own_model``), so a server
            over it needs no model folder (``fake``); see :func:`own_model`.
        streams: it runs a folder's streaming graph (cached left context; its module's
            ``open_stream_engine``): see :func:`stream_shape`, :func:`load_stream_engine`.
        threads_option: the option that caps one engine's CPU threads, where each engine
            has its own (ONNX Runtime's ``intra_op_threads``); None where threads are
            process-wide (torch) or not the host's: see :func:`engine_threads`.
    """

    name: str
    module: str
    requires: tuple[str, ...]
    suffixes: tuple[str, ...]
    default_artifacts: tuple[str, ...]
    own_model: bool = False
    streams: bool = False
    threads_option: str | None = None


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(
            "onnxruntime", "engines.ort_engine", ("onnxruntime",),
            (".onnx",), ("model.int8.onnx", "model.int4.onnx", "model.onnx"), streams=True,
            threads_option="intra_op_threads",
        ),
        Backend(
            "tensorrt", "engines.tensorrt_engine", ("tensorrt", "pycuda"),
            (".plan",), ("model.fp16.plan", "model.int8.plan", "model.fp32.plan"),
        ),
        # the folder's ONNX graph's weights, run in torch (fp16 on CUDA): engines.torch_backend
        Backend(
            "torch", "engines.torch_backend", ("torch", "transformers", "onnx"),
            (".onnx",), ("model.int8.onnx", "model.int4.onnx", "model.onnx"), streams=True,
        ),
        # synthetic logits from the token ids at a chosen cost (tests, load benchmarks)
        Backend("fake", "engines.fake", (), (), (), own_model=True),
        # windows run on a Triton Inference Server over gRPC (engines.triton_engine); the
        # folder gives the tokenizer and labels, the server the graph (build-engine --triton-repo)
        Backend("triton", "engines.triton_engine", ("tritonclient.grpc",), (), ()),
    )
}


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise EngineError(
            f"unknown engine backend {name!r}; choose one of {', '.join(BACKENDS)}"
        ) from None


def missing_dependencies(name: str) -> list[str]:
    """Import names the backend needs that are not installed."""
    return [m for m in get_backend(name).requires if not is_installed(m)]


def available_backends() -> tuple[str, ...]:
    """Backends whose Python dependencies are installed (a GPU is not checked)."""
    return tuple(name for name in BACKENDS if not missing_dependencies(name))


def require_backend(name: str) -> Backend:
    """The backend, or DependencyMissing naming the pip extra to install."""
    backend = get_backend(name)
    missing = missing_dependencies(name)
    if missing:
        raise DependencyMissing(
            f"the {name} engine backend needs {', '.join(missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed; install with: "
            f"{install_hint(*missing)}"
        )
    return backend


def own_model(backend: str, model_dir: str | Path | None = None) -> tuple[ModelMeta, Path | None] | None:
    """The model ``backend`` serves on its own, or None where it serves a model folder's (every
    backend but ``fake``): its metadata (name, windows: what a folder's ``streampunct.json`` says)
    and a folder holding its ``tokenizer.json`` (``model_dir`` when given; None: the caller's
    default, e.g. the shipped model's)."""
    b = get_backend(backend)
    if not b.own_model:
        return None
    module = importlib.import_module(b.module)
    return module.own_model(Path(model_dir) if model_dir is not None else None)


def folder_file(model_dir: str | Path, name: str, what: str = "artifact") -> Path:
    """``model_dir / name`` for a file a model folder names (``streampunct.json``'s ``artifact`` and
    ``stream_artifact``, a caller's ``artifact=``): ArtifactError for a name that leaves the folder
    (absolute, or ``..`` above it)."""
    normal = os.path.normpath(name)
    if os.path.isabs(normal) or normal == ".." or normal.startswith(".." + os.sep):
        raise ArtifactError(f"{what} {name!r} is outside the model folder {model_dir}: name a file inside it")
    return Path(model_dir) / name


def resolve_artifact(backend: str, model_dir: str | Path, artifact: str | None = None) -> Path:
    """The artifact ``backend`` loads from ``model_dir`` (see module doc for the order)."""
    b = get_backend(backend)
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ArtifactError(f"model folder {model_dir} does not exist")
    if artifact is not None:
        path = folder_file(model_dir, artifact, "artifact")
        if not path.is_file():
            raise ArtifactError(f"no artifact {artifact!r} in {model_dir}")
        return path
    named = read_model_meta(model_dir).artifact if has_model_meta(model_dir) else None
    if named is not None and Path(named).suffix in b.suffixes:
        path = folder_file(model_dir, named, f"{metadata_path(model_dir)}: artifact")
        if not path.is_file():
            what = ("a folder, not a file" if path.is_dir() else "a link to nothing" if path.is_symlink()
                    else "missing")
            raise ArtifactError(f"{metadata_path(model_dir)} names artifact {named!r}, which is {what}")
        return _torch_weights_graph(path) if backend == "torch" else path
    for name in b.default_artifacts:
        if (model_dir / name).is_file():
            return model_dir / name
    raise ArtifactError(
        f"no {backend} artifact in {model_dir} (looked for "
        f"{', '.join(b.default_artifacts)}); build one with 'streampunct build-engine'"
    )


def _torch_weights_graph(path: Path) -> Path:
    """The graph the torch backend reads weights from when a folder names ``path``: the fp32
    ``model.onnx`` beside a graph prepared for TensorRT (fp16 or Q/DQ int8: a ``build-engine
    --backend tensorrt`` folder), whose weights it does not rebuild; ``path`` otherwise."""
    beside = path.with_name("model.onnx")
    if beside == path or not beside.is_file():
        return path
    try:
        sidecar = read_sidecar(path)
    except ArtifactError:
        return path
    return beside if sidecar.prepared_for_tensorrt() is not None else path


def load_engine(
    backend: str, model_dir: str | Path, *, artifact: str | None = None, **options: Any
) -> Engine:
    """Load an engine of ``backend`` from ``model_dir``.

    ``options`` are the backend's settings (e.g. ``intra_op_threads`` for
    onnxruntime, ``device`` for tensorrt).
    Raises EngineError for an unknown backend or option, DependencyMissing
    (naming the pip extra) when the backend's packages are not installed, and
    ArtifactError when the model folder lacks a usable artifact.
    """
    b = require_backend(backend)
    path = resolve_artifact(backend, model_dir, artifact) if b.suffixes else None
    return _module(b).open_engine(Path(model_dir), path, options)


def engine_threads(backend: str, threads: int) -> dict[str, int]:
    """The options that give one engine of ``backend`` ``threads`` CPU threads, so that N
    engines side by side use N x ``threads`` cores; ``{}`` where the backend has no
    per-engine setting (its :attr:`Backend.threads_option` is None)."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    option = get_backend(backend).threads_option
    return {option: threads} if option else {}


def streaming_backends() -> tuple[str, ...]:
    """The backends that run a folder's streaming graph (cached left context)."""
    return tuple(b.name for b in BACKENDS.values() if b.streams)


def stream_shape(
    backend: str, model_dir: str | Path, mode: StreamCacheMode | str = StreamCacheMode.AUTO, *,
    meta: ModelMeta | None = None,
) -> tuple[int, int, int] | None:
    """The stream mode of an engine of ``backend`` over ``model_dir``: the (layers, heads,
    head_dim) of its streaming graph's cached keys/values when streams run with cached left
    context, None when they run whole windows.

    ``mode`` ``off``: None. ``auto``: the shape when the folder names a streaming graph
    (``stream_artifact``), does not switch it off (``"stream_cache": false``) and the backend
    runs streaming graphs (:func:`streaming_backends`: onnxruntime, torch), else None. ``on``: the shape, or
    :class:`StreamModeError`. ``meta``: the folder's ``streampunct.json`` when the caller has
    read it already (read from ``model_dir`` otherwise). The shape comes from the graph's
    sidecar; :class:`StreamModeError` when the graph it names is not a streaming graph.
    """
    try:
        mode = StreamCacheMode(mode)
    except ValueError:
        raise EngineError(f"stream cache must be one of {', '.join(StreamCacheMode)}, not {mode!r}") from None
    b = get_backend(backend)
    if mode == StreamCacheMode.OFF:
        return None
    if mode == StreamCacheMode.AUTO and not b.streams:
        return None
    if meta is None:
        meta = read_model_meta(model_dir)
    if mode == StreamCacheMode.AUTO and not meta.uses_stream_cache:
        return None  # no graph, or the folder switches it off ("stream_cache": false)
    name = meta.stream_artifact
    if not b.streams:
        raise StreamModeError(f"--stream-cache on needs an engine that runs a streaming graph "
                              f"({', '.join(streaming_backends())}), not {backend}")
    if not name:
        raise StreamModeError(f"--stream-cache on needs a model folder with a streaming graph (stream_artifact "
                              f"in {metadata_path(model_dir)}; python -m training.add_stream_graph CHECKPOINT MODEL_DIR)")
    path = folder_file(model_dir, str(name), f"{metadata_path(model_dir)}: stream_artifact")
    try:
        sidecar = read_sidecar(path)  # the shape is the sidecar's: it alone may do
    except ArtifactError:
        if not path.is_file() and not sidecar_path(path).is_file():
            raise ArtifactError(f"{metadata_path(model_dir)} names stream_artifact {name!r}, which is missing") from None
        raise
    shape = cache_shape(sidecar.inputs)
    if shape is None:
        raise StreamModeError(f"{path} is not a streaming graph (no past_kv input in its sidecar)")
    return shape


def load_stream_engine(backend: str, model_dir: str | Path, **options: Any) -> StreamEngine:
    """The engine of ``model_dir``'s streaming graph (its ``stream_artifact``; the folder's
    ``stream_cache_tokens`` is the engine's ``cache_tokens``), for a backend that runs one.
    Raises as :func:`load_engine`; StreamModeError for a backend that runs no streaming graph."""
    b = require_backend(backend)
    if not b.streams:
        raise StreamModeError(f"the {backend} engine backend runs no streaming graph")
    return _module(b).open_stream_engine(Path(model_dir), options)


def usable_cores() -> int:
    """Logical CPUs this process may run on (:func:`engines.host.usable_cores`), for the runtime,
    which reaches engines through this module."""
    from engines.host import usable_cores as host_usable_cores

    return host_usable_cores()


def physical_cores() -> int:
    """Physical cores this process may use (SMT siblings counted once): what the onnxruntime
    backend's threads default to, and what engines side by side share."""
    return _module(get_backend("onnxruntime")).physical_cores()


def _module(b: Backend) -> Any:
    """The backend's module, imported on first use."""
    try:
        return importlib.import_module(b.module)
    except ImportError as e:
        raise DependencyMissing(
            f"the {b.name} engine backend failed to import ({e}); install with: "
            f"{install_hint(*b.requires)}"
        ) from e
