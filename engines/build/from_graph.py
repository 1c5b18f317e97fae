"""A runtime model folder's own graph as the torch module build-engine exports (no checkpoint).

The shipped folders keep only quantized graphs: ``models/default`` ONNX Runtime's
dynamic int8 (``MatMulInteger`` with 7-bit per-channel weight codes, activations
quantized to uint8 with batch-wide dynamic scales by ``DynamicQuantizeLinear``),
``models/base`` a 4-bit streaming graph (``MatMulNBits``, ``GatherBlockQuantized``).
TensorRT runs neither form: its strongly typed networks take precision from the
graph, its int8 is symmetric with build-time scales, and ``MatMulNBits`` is an ONNX
Runtime contrib op. ``streampunct build-engine --backend tensorrt --model DIR``
therefore rebuilds the model from the graph's weights, de-quantized exactly (code x
scale in float32, :mod:`engines.graph_weights`) with the encoder configuration read
from the same graph, and exports the whole-window graph TensorRT takes (``input_ids``,
``attention_mask`` -> ``logits`` [, ``case_logits``]) as it does for a checkpoint;
the fp16 (or Q/DQ) graph and the plan follow from it as from any export.

:func:`source_graph` picks the folder's graph (the one onnxruntime serves) and
:func:`graph_module` rebuilds the module: the folder's Hugging Face encoder (BERT /
MiniLM or MPNet), its linear punctuation head and optional case head, computing
what ``training.model.PunctuationModel`` computes (token type ids zero for BERT).
An int8 graph's activation quantization is emulated by default
(``int8_activations="emulate"``, :func:`emulate_int8_activations`): each linear
layer quantizes its input to uint8 as ONNX Runtime's ``DynamicQuantizeLinear``
does, but with the range of each row's own real tokens (padding masked out), and
multiplies whole-number codes in float32, where their sums are exact. A row's
logits then do not depend on its batch (``rows_independent``), and its labels
are the shipped graph's as the server runs it (one window a call) up to float
rounding: the graph is float32 (its integer products need float32's mantissa;
TensorRT builds it with TF32 off). ``"float"`` rebuilds the plain float model
(fp16 plans). docs/engines.md, "TensorRT from a shipped model folder".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.base import ArtifactError
from engines.deps import require
from engines.sidecar import Sidecar, read_sidecar

logger = logging.getLogger(__name__)

#: Precisions of the graphs a module can be rebuilt from (fp16 and Q/DQ graphs are derived ones).
SOURCE_PRECISIONS = ("fp32", "int8", "int4")
#: How the activations of an int8 source graph are rebuilt: emulated row by row, or left in float.
INT8_ACTIVATIONS = ("emulate", "float")


@dataclass(frozen=True)
class GraphSource:
    """A module rebuilt from a model folder's graph.

    Attributes:
        path: the graph the weights come from.
        sidecar: its sidecar (``source_sha256`` names the checkpoint it was built from).
        module: the torch module (fp32, eval mode): ``forward(input_ids, attention_mask)``
            -> logits, and ``forward_heads`` -> (logits, case logits) with a case head.
        encoder_config: the encoder's Hugging Face configuration, read from the graph.
        has_case: the graph has a truecasing head (``case_logits``).
    """

    path: Path
    sidecar: Sidecar
    module: Any
    encoder_config: dict[str, Any]
    has_case: bool
    emulated_layers: int = 0

    def weights_from(self) -> dict[str, Any]:
        """What the derived artifacts' recipe records about the weights' origin."""
        out = {
            "artifact": self.path.name,
            "sha256": self.sidecar.artifact_sha256,
            "precision": self.sidecar.precision,
            "method": "engines.graph_weights (de-quantized in float32: code x scale)",
            "encoder": self.encoder_config.get("model_type"),
        }
        if self.emulated_layers:
            out["activations"] = (f"uint8 per row, emulated in float32 in {self.emulated_layers} linear layers "
                                  "(engines.build.from_graph.emulate_int8_activations)")
        return out


def source_graph(model_dir: str | Path) -> Path:
    """The graph of ``model_dir`` to rebuild the model from: the one onnxruntime serves
    (``streampunct.json``'s ``artifact``, else ``model.int8.onnx``, ``model.onnx``), an
    fp32, int8 or int4 graph exported by build-engine. ArtifactError otherwise."""
    from engines.registry import resolve_artifact

    model_dir = Path(model_dir)
    path = resolve_artifact("onnxruntime", model_dir)
    sidecar = read_sidecar(path)
    if sidecar.backend != "onnxruntime" or sidecar.precision not in SOURCE_PRECISIONS:
        raise ArtifactError(
            f"{path} is an {sidecar.precision} {sidecar.backend} graph: the weights are rebuilt from an "
            "fp32, int8 or int4 onnxruntime graph (pass the folder it was derived from, e.g. models/default)")
    return path


def whole_window_module(model: Any) -> Any:
    """``model`` (``encoder``, ``head.linear``, optional ``case_head.linear``, as
    :func:`engines.torch_backend.build_graph_model` makes it) with the whole-window
    interface of ``training.model.PunctuationModel``: ``forward`` -> punctuation logits,
    ``forward_heads`` -> (logits, case logits or None); BERT gets zero token type ids."""
    torch = require("torch", feature="rebuilding a model from its graph")
    import contextlib
    import inspect

    enc = model.encoder
    token_types = ("token_type_ids" in inspect.signature(enc.forward).parameters
                   and getattr(enc.config, "type_vocab_size", 0) > 0)

    class WholeWindow(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = model.encoder
            self.head = model.head
            self.case_head = model.case_head
            self.rows = RowMask()  # the real tokens of each row, for emulated int8 layers
            self.rounds_activations = False  # set by emulate_int8_activations

        @contextlib.contextmanager
        def without_rounding(self):
            """Emulated int8 layers skip the rounding to codes (a continuous function of the
            same graph: how the ONNX export checks the graph it traces, onnx_export)."""
            self.rows.rounding = False
            try:
                yield self
            finally:
                self.rows.rounding = True

        def _hidden(self, input_ids, attention_mask):
            self.rows.use(attention_mask)
            kwargs = {"token_type_ids": torch.zeros_like(input_ids)} if token_types else {}
            return self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state

        def forward(self, input_ids, attention_mask):
            return self.head(self._hidden(input_ids, attention_mask))

        def forward_heads(self, input_ids, attention_mask):
            hidden = self._hidden(input_ids, attention_mask)
            case = self.case_head(hidden) if self.case_head is not None else None
            return self.head(hidden), case

    return WholeWindow().eval()


class RowMask:
    """The real tokens of the window being run, for the emulated int8 layers (``real``, bool
    [batch, tokens, 1], set once a run by :meth:`use`), and whether they round to codes."""

    real: Any = None
    rounding: bool = True

    def use(self, attention_mask: Any) -> None:
        self.real = attention_mask.bool().unsqueeze(-1)


def _unrounded(x: Any) -> Any:
    return x


def row_int8_linear(linear: Any, steps: Any, scale: Any, rows: RowMask) -> Any:
    """A linear layer computing what an int8 graph's ``DynamicQuantizeLinear`` +
    ``MatMulInteger`` + scale computes, with each row's own activation range.

    Per row: lo = min(0, min x), hi = max(0, max x) over the row's real tokens
    (``rows.real``; padding masked out), scale = (hi - lo) / 255 (1 when
    hi == lo), zero point = round(clamp(-lo / scale, 0, 255)), codes = clamp(round(x /
    scale) + zero point, 0, 255), rounding half to even as ONNX Runtime does. The product
    (codes - zero point) x ``steps`` (the weight's code minus its zero point, [out, in])
    is a sum of whole numbers, exact in float32 while it stays under 2^24; it is scaled by
    row scale x ``scale`` (per output channel) and the bias is added."""
    torch = require("torch", feature="rebuilding a model from its graph")

    class RowInt8Linear(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("steps_t", torch.from_numpy(steps.T.copy()))   # [in, out]
            self.register_buffer("scale", torch.from_numpy(scale.copy()))       # [out]
            self.bias = linear.bias
            self.rows = rows

        def forward(self, x):
            real = self.rows.real
            dims = tuple(range(1, x.dim()))
            lo = torch.where(real, x, float("inf")).amin(dim=dims, keepdim=True).clamp(max=0.0)
            hi = torch.where(real, x, float("-inf")).amax(dim=dims, keepdim=True).clamp(min=0.0)
            step = (hi - lo) / 255.0
            step = torch.where(hi == lo, torch.ones_like(step), step)
            rnd = torch.round if self.rows.rounding else _unrounded
            zero = rnd((-lo / step).clamp(0.0, 255.0))
            codes = (rnd(x / step) + zero).clamp(0.0, 255.0)
            out = torch.matmul(codes - zero, self.steps_t) * (step * self.scale)
            return out + self.bias if self.bias is not None else out

    return RowInt8Linear()


def emulate_int8_activations(module: Any, codes: dict) -> int:
    """Replace each linear layer of ``module`` (:func:`whole_window_module`) whose weight
    has int8 codes (``codes``: parameter name -> :class:`engines.graph_weights.Int8Codes`)
    by :func:`row_int8_linear`; returns how many were replaced."""
    replaced = 0
    for name, c in codes.items():
        path = name[: -len(".weight")]
        parent_name, _, child = path.rpartition(".")
        parent = module.get_submodule(parent_name)
        setattr(parent, child, row_int8_linear(getattr(parent, child), c.steps, c.scale, module.rows))
        replaced += 1
    # its logits are a step function of float rounding (engines.build.onnx_export's check)
    module.rounds_activations = replaced > 0
    return replaced


def graph_module(path: str | Path, int8_activations: str = "emulate") -> GraphSource:
    """Rebuild the model of the graph at ``path`` (:func:`source_graph`) in torch: weights
    de-quantized from the graph, encoder configuration derived from it; an int8 graph's
    activation quantization emulated row by row (``int8_activations="emulate"``) or not
    (``"float"``). ArtifactError for a graph whose encoder or head cannot be rebuilt
    (names what is missing)."""
    from engines.graph_weights import read_graph_weights
    from engines.torch_backend import build_graph_model

    if int8_activations not in INT8_ACTIVATIONS:
        raise ValueError(f"int8_activations must be one of {INT8_ACTIVATIONS}, got {int8_activations!r}")
    path = Path(path)
    sidecar = read_sidecar(path)
    codes: dict = {}
    state, config = read_graph_weights(path, codes=codes)
    model = build_graph_model(state, config, str(path))
    module = whole_window_module(model)
    emulated = emulate_int8_activations(module, codes) if int8_activations == "emulate" else 0
    logger.info("rebuilt %s from %s (%s, %d layers, %d with emulated int8 activations)", config["model_type"],
                path, sidecar.precision, config["num_hidden_layers"], emulated)
    return GraphSource(path, sidecar, module, dict(config), model.case_head is not None, emulated)
