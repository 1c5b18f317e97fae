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
again from a full window) live in :mod:`streampunct.stream_cache`.

Two encoder layouts are supported: BERT's (``encoder.embeddings``,
``encoder.encoder.layer`` with ``attention.self.{query,key,value}``; the
MiniLM family the default model is built on) and MPNet's (``models/base``),
whose relative position bias is computed in the graph from the positions
(:func:`stream_module`). The graph is quantized as the folder's own artifact
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


def _encoder_kind(enc: Any) -> str:
    """"bert" (``embeddings``, ``encoder.layer[i].attention.self.{query,key,value}``) or
    "mpnet" (``attention.attn.{q,k,v,o}`` and a shared relative position bias); TypeError otherwise."""
    if not (hasattr(enc, "embeddings") and hasattr(getattr(enc, "encoder", None), "layer")):
        raise TypeError(f"{type(enc).__name__} is not a BERT- or MPNet-layout encoder")
    attention = enc.encoder.layer[0].attention
    if hasattr(getattr(attention, "self", None), "query"):
        return "bert"
    if hasattr(getattr(attention, "attn", None), "q") and hasattr(enc.encoder, "relative_attention_bias"):
        return "mpnet"
    raise TypeError(f"{type(enc).__name__} layers have neither attention.self.query nor attention.attn.q")


def stream_module(model: Any) -> Any:
    """A torch module ``forward(input_ids, position_ids, attention_mask, past_kv)`` over
    ``model`` (a ``PunctuationModel`` with a BERT- or MPNet-layout encoder, linear head,
    optional case head).

    MPNet adds a relative position bias to every layer's attention scores, computed from
    the positions of query and key. The interface carries no positions for the cached
    keys: they are the stream cache's contract (:class:`streampunct.stream_cache.KVCache`):
    a row's ``c`` real cached tokens hold the ``c`` positions just before its first new
    token that is not CLS (row 0, or row 1 when row 0 is CLS at position 0), oldest
    first, and a row's real cache entries come before its padding. Positions count from
    0 (CLS); MPNet's embedding table is offset by its padding index + 1, as its own
    position ids are.
    """
    torch = require("torch", feature="the streaming graph")
    enc = model.encoder
    kind = _encoder_kind(enc)
    import inspect

    # streampunct's heads take (hidden, attention_mask); a bare linear layer takes hidden alone
    head_takes_mask = len(inspect.signature(model.head.forward).parameters) >= 2

    class StreamEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model
            cfg = enc.config
            self.heads = int(cfg.num_attention_heads)
            self.head_dim = int(cfg.hidden_size) // self.heads
            self.scale = float(self.head_dim) ** -0.5

        def _embed(self, input_ids, position_ids):
            if kind == "mpnet":
                return enc.embeddings(input_ids=input_ids,
                                      position_ids=position_ids + (enc.embeddings.padding_idx + 1))
            return enc.embeddings(input_ids=input_ids, position_ids=position_ids,
                                  token_type_ids=torch.zeros_like(input_ids))

        def _position_bias(self, position_ids, attention_mask):
            """MPNet's relative position bias [B, heads, T, C+T]; None for BERT, which has none."""
            if kind != "mpnet":
                return None
            t = position_ids.shape[1]
            c = attention_mask.shape[1] - t
            held = attention_mask[:, :c].sum(dim=1, keepdim=True)  # [B, 1] real cached tokens
            slots = torch.arange(c, dtype=torch.long)[None, :]  # cached slot j of a row
            # the first new token that is not CLS (position 0): row 0 unless it is CLS, else row 1
            first = position_ids[:, :1]
            if t > 1:
                first = torch.where(first > 0, first, position_ids[:, 1:2])
            past_pos = first - held + slots  # real slots: the positions just before it
            keys = torch.cat([past_pos, position_ids], dim=1)
            relative = keys[:, None, :] - position_ids[:, :, None]  # [B, T, C+T]
            bucket = enc.encoder.relative_position_bucket(
                relative, num_buckets=enc.encoder.relative_attention_bias.num_embeddings)
            return enc.encoder.relative_attention_bias(bucket).permute(0, 3, 1, 2)

        def forward(self, input_ids, position_ids, attention_mask, past_kv):
            b, t = input_ids.shape
            x = self._embed(input_ids, position_ids)
            # [B, 1, 1, C+T] additive mask over keys.
            bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
            rel = self._position_bias(position_ids, attention_mask)
            if rel is not None:
                bias = bias + rel
            present = []
            for i, layer in enumerate(enc.encoder.layer):
                att = layer.attention
                if kind == "mpnet":
                    wq, wk, wv, wo, norm = att.attn.q, att.attn.k, att.attn.v, att.attn.o, att.LayerNorm
                else:
                    wq, wk, wv = att.self.query, att.self.key, att.self.value
                    wo, norm = att.output.dense, att.output.LayerNorm

                def split(y):
                    return y.view(b, t, self.heads, self.head_dim).transpose(1, 2)

                q = split(wq(x))
                k = split(wk(x))
                v = split(wv(x))
                present.append(torch.stack([k, v]))
                keys = torch.cat([past_kv[i, 0].to(x.dtype), k], dim=2)
                values = torch.cat([past_kv[i, 1].to(x.dtype), v], dim=2)
                scores = torch.matmul(q, keys.transpose(-1, -2)) * self.scale + bias
                a = torch.matmul(torch.softmax(scores, dim=-1), values)
                a = a.transpose(1, 2).reshape(b, t, self.heads * self.head_dim)
                x = norm(wo(a) + x)
                x = layer.output.LayerNorm(layer.output.dense(layer.intermediate(x)) + x)
            logits = model.head(x, attention_mask[:, -t:]) if head_takes_mask else model.head(x)
            outs = [logits]
            if getattr(model, "case_head", None) is not None:
                outs.append(model.case_head(x))
            outs.append(torch.stack(present).to(torch.float16))
            return tuple(outs)

    return StreamEncoder().eval()


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
    from engines.onnx_graph import io_specs, load_model
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
    from engines.model_meta import read_model_meta, update_model_meta
    from engines.quantize import (
        DynamicQuantOptions,
        Int4Options,
        quantize_int4_weights,
        quantize_int8_dynamic,
    )
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
