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
Activations are not quantized, so a row's logits do not depend on its batch
(``rows_independent``), unlike the shipped int8 graph's; its labels are the
shipped graph's up to that quantization (docs/engines.md, "TensorRT from a
shipped model folder").
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

    def weights_from(self) -> dict[str, Any]:
        """What the derived artifacts' recipe records about the weights' origin."""
        return {
            "artifact": self.path.name,
            "sha256": self.sidecar.artifact_sha256,
            "precision": self.sidecar.precision,
            "method": "engines.graph_weights (de-quantized in float32: code x scale)",
            "encoder": self.encoder_config.get("model_type"),
        }


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

        def _hidden(self, input_ids, attention_mask):
            kwargs = {"token_type_ids": torch.zeros_like(input_ids)} if token_types else {}
            return self.encoder(input_ids=input_ids, attention_mask=attention_mask, **kwargs).last_hidden_state

        def forward(self, input_ids, attention_mask):
            return self.head(self._hidden(input_ids, attention_mask))

        def forward_heads(self, input_ids, attention_mask):
            hidden = self._hidden(input_ids, attention_mask)
            case = self.case_head(hidden) if self.case_head is not None else None
            return self.head(hidden), case

    return WholeWindow().eval()


def graph_module(path: str | Path) -> GraphSource:
    """Rebuild the model of the graph at ``path`` (:func:`source_graph`) in torch: weights
    de-quantized from the graph, encoder configuration derived from it. ArtifactError
    for a graph whose encoder or head cannot be rebuilt (names what is missing)."""
    from engines.graph_weights import read_graph_weights
    from engines.torch_backend import build_graph_model

    path = Path(path)
    sidecar = read_sidecar(path)
    state, config = read_graph_weights(path)
    model = build_graph_model(state, config, str(path))
    module = whole_window_module(model)
    logger.info("rebuilt %s from %s (%s, %d layers)", config["model_type"], path,
                sidecar.precision, config["num_hidden_layers"])
    return GraphSource(path, sidecar, module, dict(config), model.case_head is not None)
