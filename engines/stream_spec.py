"""The streaming graph's interface: what serving needs to know of it, apart from how it is built.

The runtime (:mod:`engines.ort_engine`, :mod:`engines.torch_backend`, the
server) checks and runs a streaming graph through this module only; its
export and quantization live in :mod:`engines.build.stream_graph` and
:mod:`engines.build.quantize`, which import this module (never the other way).

Interface (all batch-major; ``C`` cached tokens, ``T`` new ones)::

    input_ids       int64[B, T]
    position_ids    int64[B, T]     absolute positions (the cache keeps its own)
    attention_mask  int64[B, C + T] 1 for real cached and new tokens, 0 for padding
    past_kv         float16[L, 2, B, heads, C, head_dim]
    ->
    logits          float32[B, T, 4]
    case_logits     float32[B, T, 4]    (models with a case head)
    present_kv      float16[L, 2, B, heads, T, head_dim]

With ``C = 0`` it is the shipped computation exactly (the full window, its
own positions). The caller's rules (which tokens to cache, when to start
again from a full window) live in :mod:`streampunct.core.stream_cache`.
"""

from __future__ import annotations

from engines.base import TensorSpec

STREAM_INPUTS: tuple[str, ...] = ("input_ids", "position_ids", "attention_mask", "past_kv")
STREAM_OUTPUTS: tuple[str, ...] = ("logits", "case_logits", "present_kv")
#: The artifact name in a model folder; ``streampunct.json`` names it as ``stream_artifact``.
STREAM_ARTIFACT = "model.stream.int8.onnx"


def stream_artifact_name(precision: str) -> str:
    """The streaming graph's file name in a model folder whose artifact has ``precision``."""
    return STREAM_ARTIFACT if precision == "int8" else f"model.stream.{precision}.onnx"


def stream_interface_problems(inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> list[str]:
    """What is wrong with a streaming graph's interface (module docstring); [] when nothing."""
    problems: list[str] = []
    names = [t.name for t in inputs]
    if names != list(STREAM_INPUTS):
        problems.append(f"inputs are {names}, expected {list(STREAM_INPUTS)}")
    out = [t.name for t in outputs]
    if out not in (list(STREAM_OUTPUTS), [STREAM_OUTPUTS[0], STREAM_OUTPUTS[2]]):
        problems.append(f"outputs are {out}, expected {list(STREAM_OUTPUTS)} (case_logits optional)")
    for t in inputs:
        if t.name == "past_kv":
            if t.dtype != "float16" or len(t.shape) != 6 or not all(isinstance(t.shape[k], int) for k in (0, 1, 3, 5)):
                problems.append(f"past_kv is {t.dtype}{list(t.shape)}, expected float16[L, 2, batch, heads, past, head_dim]")
        elif t.dtype != "int64" or len(t.shape) != 2:
            problems.append(f"input {t.name} is {t.dtype}{list(t.shape)}, expected int64[batch, n]")
    return problems


def cache_shape(inputs: tuple[TensorSpec, ...]) -> tuple[int, int, int] | None:
    """(layers, heads, head_dim) of a streaming graph's ``past_kv`` input; None when the
    inputs have no such tensor (not a streaming graph)."""
    past = next((t for t in inputs if t.name == "past_kv"), None)
    if past is None or len(past.shape) != 6 or not all(isinstance(past.shape[k], int) for k in (0, 3, 5)):
        return None
    return int(past.shape[0]), int(past.shape[3]), int(past.shape[5])
