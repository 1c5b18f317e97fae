"""The torch serving backend: a model folder's own graph, run in torch (fp16 on CUDA, fp32 on the CPU).

A GPU serves without TensorRT: ``load_engine("torch", "models/default",
device="cuda")`` or ``streampunct serve --engine torch --engine-option
device=cuda``. Nothing but the model folder is read: the weights are the
folder's ONNX graph's, de-quantized (:mod:`engines.graph_weights`; an int8 or
int4 graph's weights keep its quantization grid, but activations are not
quantized), and the encoder's configuration (BERT / MiniLM or MPNet) is
derived from the same graph. The computation is the streaming graph's module
(:func:`stream_module`, also what :mod:`engines.build.stream_graph` exports): whole windows are its calls
without a cache (positions 0..T-1), which is the shipped graph's computation,
and :meth:`TorchGraphEngine.infer_stream` runs new tokens against cached
keys/values with the streaming graph's interface, so a server streams with
it as it does with :class:`engines.ort_engine.OrtStreamEngine`.

Precision: fp16 on CUDA (weights, activations, keys/values), fp32 on the CPU;
LayerNorm, softmax and the reductions inside them run in float32 in torch's
CUDA kernels. ``precision=fp32`` on CUDA gives the reference numbers;
``precision=fp16`` on the CPU runs (slowly) so that tests can check the fp16
path without a GPU.
"""

from __future__ import annotations

import logging
import threading
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
    EngineError,
    HeadLogits,
    InferenceError,
    IOSpec,
    StreamEngineBase,
    TensorSpec,
    check_batch,
    make_options,
)
from engines.deps import require
from engines.host import check_threads

logger = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("auto", "fp32", "fp16")


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
    keys: they are the stream cache's contract (:class:`streampunct.core.stream_cache.KVCache`):
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


@dataclass(frozen=True)
class TorchOptions:
    """Settings of the torch backend (``--engine-option KEY=VALUE``).

    Attributes:
        device: ``auto`` (CUDA when torch sees a GPU, else the CPU), ``cpu``, ``cuda``
            or ``cuda:N``.
        precision: ``auto`` (fp16 on CUDA, fp32 on the CPU), ``fp32`` or ``fp16``.
        threads: torch's intra-op threads on the CPU (process-wide); None: torch's default.
        verify_checksum: compare the graph's sha256 with its sidecar on load.
    """

    device: str = "auto"
    precision: str = "auto"
    threads: int | None = None
    verify_checksum: bool = True

    def __post_init__(self) -> None:
        kind = self.device.split(":")[0]
        if kind not in DEVICES or (":" in self.device and (kind != "cuda" or not self.device[5:].isdigit())):
            raise EngineError(f"device must be auto, cpu, cuda or cuda:N, not {self.device!r}")
        if self.precision not in PRECISIONS:
            raise EngineError(f"precision must be one of {', '.join(PRECISIONS)}, not {self.precision!r}")
        check_threads("threads", self.threads)


def build_graph_model(state: Mapping[str, np.ndarray], config: Mapping[str, Any], where: str) -> Any:
    """A torch module with ``encoder`` (Hugging Face, from ``config``), ``head`` and optional
    ``case_head`` (linear layers), holding exactly the weights ``state`` (fp32, eval mode)."""
    torch = require("torch", feature="the torch backend")
    transformers = require("transformers", feature="the torch backend")
    cfg = dict(config)
    hf_config = transformers.AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    encoder = transformers.AutoModel.from_config(hf_config, add_pooling_layer=False)

    class Linear(torch.nn.Module):
        """``head.linear`` / ``case_head.linear``: the parameter names of the exported heads."""

        def __init__(self, weight: np.ndarray) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(weight.shape[1], weight.shape[0])

        def forward(self, hidden):
            return self.linear(hidden)

    class GraphModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder
            self.head = Linear(state["head.linear.weight"])
            self.case_head = Linear(state["case_head.linear.weight"]) if "case_head.linear.weight" in state else None

    if "head.linear.weight" not in state:
        raise ArtifactError(f"{where}: no linear punctuation head (head.linear.weight) among the graph's weights")
    model = GraphModel()
    expected = {k for k in model.state_dict() if not k.endswith(("position_ids", "token_type_ids"))}
    missing, extra = sorted(expected - state.keys()), sorted(state.keys() - expected)
    if missing or extra:
        raise ArtifactError(f"{where}: weights missing {missing[:5]}, unexpected {extra[:5]} for a "
                            f"{config['model_type']} encoder with a linear head")
    for name, value in model.state_dict().items():
        if name in state and tuple(value.shape) != tuple(state[name].shape):
            raise ArtifactError(f"{where}: {name} is {list(state[name].shape)}, the encoder needs {list(value.shape)}")
    model.load_state_dict({k: torch.from_numpy(np.require(v, np.float32, ("C", "W"))) for k, v in state.items()},
                          strict=False)
    return model.eval()


class TorchGraphEngine(StreamEngineBase):
    """A model folder's graph weights in torch behind the Engine protocol, with the streaming
    graph's ``infer_stream`` (cached left context).

    Attributes:
        name: ``"torch"``.
        path: the graph the weights come from.
        device: the torch device; ``device_name`` says which GPU (or ``cpu``).
        precision: ``fp16`` or ``fp32``.
        stream_shape: (layers, heads, head_dim) of the cached keys/values.
        cache_tokens: cached tokens per stream the model folder asks for
            (``stream_cache_tokens``); None: the streaming window's left context.
        rows_independent: True: activations are not quantized, a row's logits depend
            on that row alone.
    """

    name = "torch"
    rows_independent = True
    def __init__(self, path: str | Path, options: TorchOptions | None = None, *,
                 cache_tokens: int | None = None) -> None:
        if cache_tokens is not None and cache_tokens < 1:
            raise EngineError(f"cache_tokens must be >= 1, got {cache_tokens}")
        self.cache_tokens = cache_tokens
        torch = require("torch", feature="the torch backend")
        from engines.graph_weights import read_graph_weights
        from engines.sidecar import read_sidecar, verify_artifact

        self.options = options or TorchOptions()
        self.path = Path(path)
        if not self.path.is_file():
            raise ArtifactError(f"no ONNX graph at {self.path}")
        sidecar = read_sidecar(self.path)
        if self.options.verify_checksum:
            verify_artifact(self.path, sidecar)
        self.device = _device(torch, self.options.device)
        self.precision = self.options.precision
        if self.precision == "auto":
            self.precision = "fp16" if self.device.type == "cuda" else "fp32"
        if self.options.threads is not None:
            torch.set_num_threads(self.options.threads)
        self.device_name = torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"
        state, config = read_graph_weights(self.path)
        model = build_graph_model(state, config, str(self.path))
        self.has_case = model.case_head is not None
        self.num_labels = int(state["head.linear.weight"].shape[0])
        heads = int(config["num_attention_heads"])
        self.stream_shape = (int(config["num_hidden_layers"]), heads, int(config["hidden_size"]) // heads)
        self.encoder_config = dict(config)
        self._dtype = torch.float16 if self.precision == "fp16" else torch.float32
        try:
            model = model.to(device=self.device, dtype=self._dtype)
        except RuntimeError as e:  # CUDA out of memory, a device that went away
            raise EngineError(f"cannot move {self.path.name}'s weights to {self.device}: {e}") from e
        self._torch = torch
        self._module = stream_module(model)
        self._lock = threading.Lock()
        logger.info("loaded %s into torch (%s %s, %d layers, %s) on %s", self.path, config["model_type"],
                    self.precision, self.stream_shape[0], "case head" if self.has_case else "no case head",
                    self.device_name)

    # -- running ------------------------------------------------------------------------

    def _tensor(self, array: np.ndarray):
        return self._torch.from_numpy(np.require(array, requirements=("C", "W"))).to(self.device)

    def _run(self, ids: np.ndarray, pos: np.ndarray, mask: np.ndarray, past: np.ndarray | None,
             *, present: bool) -> list[np.ndarray]:
        """The stream module's outputs as numpy: logits (and case logits) float32, then
        present_kv float16 when ``present``. ``past`` None: no cache (whole windows)."""
        torch = self._torch
        if self._module is None:
            raise InferenceError(f"torch engine for {self.path.name} is closed")
        layers, heads, head_dim = self.stream_shape
        try:
            # the device as torch's default: tensors the module makes (MPNet's cache slots) go there too
            with self._lock, torch.inference_mode(), self.device:
                if past is None:
                    past_t = torch.zeros((layers, 2, ids.shape[0], heads, 0, head_dim), dtype=torch.float16,
                                         device=self.device)
                else:
                    past_t = self._tensor(past)
                outs = self._module(self._tensor(ids), self._tensor(pos), self._tensor(mask), past_t)
                heads_out = [o.float().cpu().numpy() for o in outs[:-1]]
                if present:
                    heads_out.append(outs[-1].cpu().numpy())
        except RuntimeError as e:  # shape errors, CUDA errors (out of memory included)
            raise InferenceError(f"torch failed on a batch of shape {ids.shape}: {e}") from e
        return heads_out

    def _whole(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> list[np.ndarray]:
        ids, mask = check_batch(input_ids, attention_mask)
        b, t = ids.shape
        return self._run(ids, np.tile(np.arange(t, dtype=np.int64), (b, 1)), mask, None, present=False)

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """int64[B,T], int64[B,T] -> float32[B,T,C]."""
        return self._whole(input_ids, attention_mask)[0]

    def infer_heads(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> HeadLogits:
        """Punctuation logits float32[B,T,C] and case logits float32[B,T,4] (None without a
        case head), from one run."""
        outs = self._whole(input_ids, attention_mask)
        return HeadLogits(outs[0], outs[1] if len(outs) > 1 else None)

    def infer_stream(self, inputs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The streaming graph's inputs (``streampunct.core.stream_cache.pad_stream_calls``) ->
        (logits float32[B, T, C], the case logits appended when the model has them;
        present_kv float16[L, 2, B, heads, T, head_dim])."""
        try:
            ids, pos, mask, past = (np.asarray(inputs[k]) for k in
                                    ("input_ids", "position_ids", "attention_mask", "past_kv"))
        except KeyError as e:
            raise InferenceError(f"a streaming call needs input {e.args[0]!r}") from None
        layers, heads, head_dim = self.stream_shape
        if (ids.ndim != 2 or pos.shape != ids.shape or mask.ndim != 2 or mask.shape[0] != ids.shape[0]
                or past.ndim != 6 or past.shape[:2] != (layers, 2) or past.shape[2] != ids.shape[0]
                or (past.shape[3], past.shape[5]) != (heads, head_dim)
                or mask.shape[1] != past.shape[4] + ids.shape[1]):
            raise InferenceError(
                f"streaming call shapes do not fit: input_ids {ids.shape}, position_ids {pos.shape}, "
                f"attention_mask {mask.shape}, past_kv {past.shape} (cache {self.stream_shape})")
        outs = self._run(ids.astype(np.int64, copy=False), pos.astype(np.int64, copy=False),
                         mask.astype(np.int64, copy=False), past.astype(np.float16, copy=False), present=True)
        logits = np.concatenate(outs[:-1], axis=-1) if len(outs) > 2 else outs[0]
        return logits, outs[-1]

    def io_spec(self) -> IOSpec:
        dyn = ("batch", "sequence")
        outputs = [TensorSpec(OUTPUT_NAME, "float32", (*dyn, self.num_labels))]
        if self.has_case:
            outputs.append(TensorSpec(CASE_OUTPUT_NAME, "float32", (*dyn, 4)))
        return IOSpec(backend="torch", artifact=self.path.name, precision=self.precision,
                      inputs=tuple(TensorSpec(n, "int64", dyn) for n in INPUT_NAMES), outputs=tuple(outputs))

    def close(self) -> None:
        """Drop the weights (and CUDA's cached blocks of them)."""
        if self._module is None:
            return
        self._module = None
        if self.device.type == "cuda":
            self._torch.cuda.empty_cache()


def _device(torch: Any, name: str) -> Any:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise EngineError(f"device {name}: torch sees no CUDA GPU (torch {torch.__version__}, "
                              f"built for CUDA {torch.version.cuda or 'none'}); use device=cpu")
        index = int(name[5:]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise EngineError(f"device {name}: torch sees {torch.cuda.device_count()} CUDA GPU(s)")
        return torch.device("cuda", index)
    return torch.device("cpu")


def open_engine(model_dir: Path, artifact: Path | None, options: Mapping[str, Any]) -> TorchGraphEngine:
    """Registry entry point: ``load_engine("torch", model_dir, device="cuda")``."""
    from engines.model_meta import has_model_meta, read_model_meta

    if artifact is None:
        raise ArtifactError(f"the torch backend needs an ONNX graph in {model_dir} (its weights)")
    tokens = read_model_meta(model_dir).stream_cache_tokens if has_model_meta(model_dir) else None
    return TorchGraphEngine(artifact, make_options(TorchOptions, options, "torch"), cache_tokens=tokens)


def open_stream_engine(model_dir: str | Path, options: Mapping[str, Any] | None = None) -> TorchGraphEngine:
    """Registry entry point of cached left context (``load_stream_engine("torch", ...)``): the
    weights of the folder's streaming graph (``stream_artifact``) in torch; its
    ``stream_cache_tokens`` is the engine's ``cache_tokens``. The same engine runs whole
    windows (a full call), as :class:`engines.ort_engine.OrtStreamEngine` does."""
    from engines.model_meta import read_model_meta

    model_dir = Path(model_dir)
    meta = read_model_meta(model_dir)
    if not meta.stream_artifact:
        raise ArtifactError(f"{model_dir} has no streaming graph (no stream_artifact in streampunct.json)")
    return TorchGraphEngine(model_dir / meta.stream_artifact, make_options(TorchOptions, dict(options or {}), "torch"),
                            cache_tokens=meta.stream_cache_tokens)
