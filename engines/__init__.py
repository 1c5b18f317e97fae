"""Model -> engine: ONNX export, ONNX Runtime and TensorRT engines behind one protocol.

Serving code needs only :func:`load_engine` and the :class:`Engine` protocol::

    from engines import load_engine
    engine = load_engine("onnxruntime", "models/default")
    logits = engine.infer(input_ids, attention_mask)   # float32[B, T, C]

Backends are imported lazily; this package imports neither ``streampunct``
nor ``training``. See docs/engines.md.
"""

from engines.base import (
    ArtifactError,
    ArtifactMismatch,
    BuildError,
    CudaError,
    DependencyMissing,
    Engine,
    EngineError,
    ExportError,
    GraphPrepError,
    InferenceError,
    IOSpec,
    TensorSpec,
)
from engines.registry import available_backends, load_engine

__all__ = [
    "ArtifactError",
    "ArtifactMismatch",
    "BuildError",
    "CudaError",
    "DependencyMissing",
    "Engine",
    "EngineError",
    "ExportError",
    "GraphPrepError",
    "IOSpec",
    "InferenceError",
    "TensorSpec",
    "available_backends",
    "load_engine",
]
