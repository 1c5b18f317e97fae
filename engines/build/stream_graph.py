"""The streaming graph: an encoder run on new tokens against cached keys/values.

A live stream decides a few words per window. The shipped graph re-encodes
the whole window, left context included, at every decision: at right
context 4 that is ~12 encoded tokens per finalized word, most of them left
context encoded before. The streaming graph takes only the new tokens (CLS,
the words to decide, their right context, SEP) plus, per layer, the
attention keys and values of the stream's earlier tokens, computed in the
windows that decided them; it returns the new tokens' logits and their keys
and values, so the caller can keep those of the decided words.

The interface (names, dtypes, shapes; checked by the runtime) is
:mod:`engines.stream_spec`'s; this module builds graphs that have it (the
torch module, its ONNX export, the quantized artifact in a model folder)::

    input_ids int64[B, T], position_ids int64[B, T], attention_mask int64[B, C + T],
    past_kv float16[L, 2, B, heads, C, head_dim]
    -> logits float32[B, T, 4], case_logits float32[B, T, 4] (optional),
       present_kv float16[L, 2, B, heads, T, head_dim]

Keys and values cross the interface in float16 (the graph computes in
float32): half the memory per stream, and the casts run inside ONNX Runtime,
where they cost nothing measurable, not in numpy, where converting a batch's
cache took as long as a tenth of the engine call (while holding the GIL).

With ``C = 0`` it is the shipped computation exactly (the full window, its
own positions). The caller's rules (which tokens to cache, when to start
again from a full window) live in :mod:`streampunct.core.stream_cache`.

Two encoder layouts are supported: BERT's (``encoder.embeddings``,
``encoder.encoder.layer`` with ``attention.self.{query,key,value}``; the
MiniLM family the default model is built on) and MPNet's (``models/base``),
whose relative position bias is computed in the graph from the positions
(:func:`engines.torch_backend.stream_module`). The graph is quantized as the folder's own artifact
is: dynamic int8 (``model.stream.int8.onnx``) or 4-bit weights
(``model.stream.int4.onnx``).
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import ExportError
from engines.deps import require
from engines.stream_spec import (  # noqa: F401 (STREAM_ARTIFACT, cache_shape: kept importable from here)
    STREAM_ARTIFACT,
    STREAM_INPUTS,
    STREAM_OUTPUTS,
    cache_shape,
    stream_artifact_name,
    stream_interface_problems,
)
from engines.torch_backend import stream_module

logger = logging.getLogger(__name__)
_DYNAMIC = {
    "input_ids": {0: "batch", 1: "new"},
    "position_ids": {0: "batch", 1: "new"},
    "attention_mask": {0: "batch", 1: "total"},
    "past_kv": {2: "batch", 4: "past"},
    "logits": {0: "batch", 1: "new"},
    "case_logits": {0: "batch", 1: "new"},
    "present_kv": {2: "batch", 4: "new"},
}


def layout(model: Any) -> tuple[int, int, int]:
    """(layers, heads, head_dim) of a ``PunctuationModel``'s encoder."""
    cfg = model.encoder.config
    heads = int(cfg.num_attention_heads)
    return int(cfg.num_hidden_layers), heads, int(cfg.hidden_size) // heads


def _sample(layers: int, heads: int, head_dim: int, batch: int, new: int, past: int, vocab: int, seed: int):
    rng = np.random.default_rng(seed)
    ids = rng.integers(min(1000, vocab // 2), vocab, (batch, new)).astype(np.int64)
    pos = np.tile(np.arange(past + 1, past + 1 + new), (batch, 1)).astype(np.int64)
    pos[:, 0] = 0
    mask = np.ones((batch, past + new), np.int64)
    if batch > 1:  # padding in both parts of one row
        mask[-1, past // 2 : past] = 0
        mask[-1, past + new - 2 :] = 0
    kv = (rng.standard_normal((layers, 2, batch, heads, past, head_dim)) * 0.5).astype(np.float16)
    return ids, pos, mask, kv


@dataclass(frozen=True)
class StreamExport:
    path: Path
    max_abs_diff: float


def export_stream_onnx(model: Any, out_path: str | Path, *, source_sha256: str, opset: int = 17,
                       atol: float = 1e-3) -> StreamExport:
    """Export ``model``'s streaming graph (fp32) with its sidecar; checked against torch on
    several shapes (cache lengths 0, 9 and 31, padding in cache and new tokens)."""
    torch = require("torch", feature="the streaming graph")
    ort = require("onnxruntime", feature="verifying the streaming graph")
    from engines.build.onnx_graph import io_specs, load_model
    from engines.sidecar import new_sidecar, write_sidecar

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    module = stream_module(model)
    layers, heads, head_dim = layout(model)
    vocab = int(model.encoder.config.vocab_size)
    has_case = getattr(model, "case_head", None) is not None
    outputs = list(STREAM_OUTPUTS) if has_case else [STREAM_OUTPUTS[0], STREAM_OUTPUTS[2]]
    trace = _sample(layers, heads, head_dim, 2, 6, 5, vocab, 0)
    try:
        with torch.no_grad():
            torch.onnx.export(module, tuple(torch.from_numpy(a) for a in trace), str(out_path), dynamo=False,
                              input_names=list(STREAM_INPUTS), output_names=outputs,
                              dynamic_axes={k: v for k, v in _DYNAMIC.items() if k in (*STREAM_INPUTS, *outputs)},
                              opset_version=opset, do_constant_folding=True)
    except Exception as e:  # the exporter raises many unrelated types
        raise ExportError(f"torch.onnx.export of the streaming graph failed: {type(e).__name__}: {e}") from e
    session = ort.InferenceSession(str(out_path), providers=["CPUExecutionProvider"])
    worst = 0.0
    for k, (b, t, c) in enumerate(((1, 30, 0), (3, 9, 9), (4, 12, 31))):
        feed = _sample(layers, heads, head_dim, b, t, c, vocab, k + 1)
        with torch.no_grad():
            ref = module(*(torch.from_numpy(a) for a in feed))
        got = session.run(outputs, dict(zip(STREAM_INPUTS, feed, strict=True)))
        new_mask = feed[2][:, c:].astype(bool)
        for r, g in zip(ref, got, strict=True):
            r = r.float().numpy()
            diff = np.abs(r - g.astype(np.float32))
            if r.ndim == 6:  # float16 keys/values: one rounding step apart at most; [L, 2, B, heads, T, d] -> [B, T, ...]
                diff = np.moveaxis(diff / (1.0 + np.abs(r)) / 4.0, (2, 4), (0, 1))
            worst = max(worst, float(diff[new_mask].max()))
    if worst > atol:
        raise ExportError(f"the streaming graph differs from torch by {worst:.3g} (tolerance {atol:g})")
    inputs, outs = io_specs(load_model(out_path, load_weights=False))
    problems = stream_interface_problems(inputs, outs)
    if problems:
        raise ExportError(f"{out_path}: " + "; ".join(problems))
    sidecar = new_sidecar(out_path, backend="onnxruntime", precision="fp32", inputs=inputs, outputs=outs,
                          source_sha256=source_sha256,
                          recipe={"method": "torch.onnx.export (TorchScript, dynamo=False)", "opset": opset,
                                  "graph": "stream"})
    write_sidecar(sidecar, out_path)
    return StreamExport(out_path, worst)


def build_stream_artifact(model: Any, model_dir: str | Path, *, source_sha256: str,
                          quantize_embeddings: bool | None = None, weights_from: str | None = None) -> Path:
    """Write the streaming graph into ``model_dir`` with the quantization of the folder's own
    artifact (int8 dynamic: ``STREAM_ARTIFACT``; int4 weights: ``model.stream.int4.onnx``,
    same block size, accuracy level and embedding tables), and name it in ``streampunct.json``.

    ``weights_from``: recorded in the sidecar's recipe when ``model`` was imported from a
    quantized graph rather than trained (``training.add_stream_graph --from-graph``).
    """
    from engines.build.quantize import (
        DynamicQuantOptions,
        Int4Options,
        quantize_int4_weights,
        quantize_int8_dynamic,
    )
    from engines.model_meta import read_model_meta, update_model_meta
    from engines.sidecar import read_sidecar, write_sidecar

    model_dir = Path(model_dir)
    artifact = model_dir / (read_model_meta(model_dir).artifact or "")
    parent = read_sidecar(artifact) if artifact.is_file() else None
    precision = parent.precision if parent is not None else "int8"
    recipe = (parent.recipe if parent is not None else None) or {}
    if precision not in ("int8", "int4"):
        raise ExportError(f"{artifact} is {precision}: the streaming graph is built as int8 or int4 only")
    out = model_dir / stream_artifact_name(precision)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = export_stream_onnx(model, Path(tmp) / "model.stream.onnx", source_sha256=source_sha256)
        if precision == "int4":
            options = Int4Options(block_size=int(recipe.get("block_size", 32)),
                                  accuracy_level=int(recipe.get("accuracy_level", 4)),
                                  quantize_embeddings=bool(recipe.get("quantize_embeddings", True)))
            sidecar = quantize_int4_weights(fp32.path, out, options, stream=True)
        else:
            if quantize_embeddings is None:  # follow the folder's int8 artifact
                quantize_embeddings = bool(recipe.get("quantize_embeddings", False))
            sidecar = quantize_int8_dynamic(fp32.path, out,
                                            DynamicQuantOptions(quantize_embeddings=quantize_embeddings),
                                            stream=True)
    if weights_from:
        write_sidecar(sidecar.replace(recipe={**(sidecar.recipe or {}), "weights_from": weights_from}), out)
    update_model_meta(model_dir, stream_artifact=out.name)
    logger.info("wrote %s (streaming graph, %s)", out, precision)
    return out
