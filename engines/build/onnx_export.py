"""Export a torch token classifier to ONNX with dynamic batch and sequence axes.

Exporter choice: the TorchScript exporter (``torch.onnx.export(...,
dynamo=False)``). For BERT-style encoders with two dynamic axes it is the one
that reliably yields a single static graph with symbolic ``batch``/``sequence``
dims and a fused ``LayerNormalization`` (opset 17), which is what ONNX Runtime's
quantizer, nvidia-modelopt and the TensorRT parser expect. The dynamo exporter
specializes on data-dependent branches of the Hugging Face mask code and
needs ``Dim`` constraints per model; revisit when it no longer does.

The export traces with a padded row in the sample batch, so that mask code
which skips work for all-ones masks takes the general path, and then
verifies the graph: ``onnx.checker`` (full check), the interface, and ONNX
Runtime logits against torch on shapes other than the traced one.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import CASE_OUTPUT_NAME, INPUT_NAMES, OUTPUT_NAME, ExportError
from engines.build.onnx_graph import interface_problems, io_specs
from engines.build.parity import compare_logits
from engines.build.torch_engine import logits_module
from engines.deps import require
from engines.sidecar import Sidecar, new_sidecar, write_sidecar

logger = logging.getLogger(__name__)

DEFAULT_OPSET = 17
#: The earliest opset the encoders export at (``aten::scaled_dot_product_attention`` needs 14).
MIN_EXPORT_OPSET = 14
#: Shapes (batch, seq) checked against torch after export; the trace uses (2, 16).
_VERIFY_SHAPES = ((3, 23), (1, 9))


@dataclass(frozen=True)
class ExportResult:
    """What :func:`export_onnx` wrote and how well the graph matches torch.

    Attributes:
        path: the ONNX file.
        sidecar: its sidecar (also written next to it).
        max_abs_diff: largest |ORT - torch| logit difference over the verify shapes.
        max_rel_diff: ``max_abs_diff`` divided by the largest |torch logit|.
        num_labels: C, the size of the logits' last axis.
    """

    path: Path
    sidecar: Sidecar
    max_abs_diff: float
    max_rel_diff: float
    num_labels: int


def vocab_size_of(module) -> int:
    """Rows of the first embedding table (token ids for samples stay in range)."""
    torch = require("torch", feature="ONNX export")
    for sub in module.modules():
        if isinstance(sub, torch.nn.Embedding):
            return int(sub.num_embeddings)
    return 100


def weights_sha256(module) -> str:
    """A hash of a module's state dict (names, dtypes and bytes)."""
    torch = require("torch", feature="ONNX export")
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def sample_batch(batch: int, seq: int, vocab_size: int, *, seed: int = 0):
    """Random int64 ids in [1, vocab) with the last row right-padded by a third."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, max(2, vocab_size), size=(batch, seq), dtype=np.int64)
    mask = np.ones_like(ids)
    if batch > 1 or seq > 3:
        pad = max(1, seq // 3)
        mask[-1, seq - pad:] = 0
        ids[-1, seq - pad:] = 0
    return ids, mask


def _torch_logits(wrapper, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    torch = require("torch", feature="ONNX export")
    with torch.no_grad():
        out = wrapper(torch.from_numpy(ids), torch.from_numpy(mask))
    if isinstance(out, tuple):  # punctuation, case: compared side by side
        out = torch.cat(out, dim=-1)
    return out.float().cpu().numpy()


def heads_module(module: Any) -> Any | None:
    """For a model with a truecasing head (``forward_heads(ids, mask) -> (logits, case)`` with a
    case tensor), a wrapper whose forward returns both; else None."""
    torch = require("torch", feature="ONNX export")
    if not callable(getattr(module, "forward_heads", None)) or getattr(module, "case_head", None) is None:
        return None

    class Heads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, input_ids, attention_mask):
            return self.inner.forward_heads(input_ids, attention_mask)

    return Heads().eval()


def _export_failure(error: Exception, opset: int) -> str:
    """One line for an exporter error: its first line (the exporter appends the whole traced
    graph to some), and the default opset as a hint when another was asked for."""
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    first = first.split(" [Caused by ")[0]  # the rest is the traced graph's IR
    if len(first) > 500:
        first = first[:500] + "..."
    hint = f" (the default opset, {DEFAULT_OPSET}, exports the supported encoders)" if opset != DEFAULT_OPSET else ""
    return f"torch.onnx.export failed at opset {opset}: {type(error).__name__}: {first}{hint}"


def _trace(torch: Any, wrapper: Any, out_path: Path, trace_ids: np.ndarray, trace_mask: np.ndarray,
           output_names: list[str], opset: int) -> None:
    dynamic = {"batch": 0, "sequence": 1}
    dynamic_axes = {
        name: {axis: label for label, axis in dynamic.items()}
        for name in (*INPUT_NAMES, *output_names)
    }
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        try:
            torch.onnx.export(
                wrapper,
                (torch.from_numpy(trace_ids), torch.from_numpy(trace_mask)),
                str(out_path),
                dynamo=False,
                input_names=list(INPUT_NAMES),
                output_names=output_names,
                dynamic_axes=dynamic_axes,
                opset_version=opset,
                do_constant_folding=True,
            )
        except Exception as e:  # the exporter raises many unrelated types
            raise ExportError(_export_failure(e, opset)) from e
    for w in caught:
        logger.debug("exporter warning: %s: %s", w.category.__name__, w.message)


def _check_graph(onnx: Any, out_path: Path) -> tuple:
    """onnx.checker and the interface: (inputs, outputs)."""
    try:
        onnx.checker.check_model(str(out_path), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise ExportError(f"exported graph {out_path} fails onnx.checker: {e}") from e
    inputs, outputs = io_specs(onnx.load(str(out_path)))
    problems = interface_problems(inputs, outputs)
    if problems:
        raise ExportError(f"exported graph {out_path} has the wrong interface: " + "; ".join(problems))
    return inputs, outputs


def _verify(ort: Any, path: Path, wrapper: Any, output_names: list[str], vocab: int,
            verify_rtol: float | None) -> tuple[float, float]:
    """(max |diff|, max relative diff) of ONNX Runtime's logits against torch's on
    :data:`_VERIFY_SHAPES`; ExportError beyond ``verify_rtol`` (None: measure only)."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst_abs, worst_rel = 0.0, 0.0
    for i, (batch, seq) in enumerate(_VERIFY_SHAPES):
        ids, mask = sample_batch(batch, seq, vocab, seed=i + 1)
        got = np.concatenate(session.run(output_names, {"input_ids": ids, "attention_mask": mask}), axis=-1)
        report = compare_logits(_torch_logits(wrapper, ids, mask), got, mask)
        worst_abs = max(worst_abs, report.max_abs_diff)
        worst_rel = max(worst_rel, report.max_rel_diff)
    if verify_rtol is not None and worst_rel > verify_rtol:
        raise ExportError(
            f"ONNX Runtime logits differ from torch by {worst_abs:.3g} "
            f"({worst_rel:.3g} relative, tolerance {verify_rtol:g}) on shapes {_VERIFY_SHAPES}: "
            "the export specialized on the traced shape or dropped the attention mask"
        )
    return worst_abs, worst_rel


def export_onnx(
    module: Any,
    out_path: str | Path,
    *,
    source_sha256: str = "",
    opset: int = DEFAULT_OPSET,
    verify_rtol: float = 1e-4,
) -> ExportResult:
    """Export ``module`` (forward(input_ids, attention_mask) -> logits) to ``out_path``.

    Writes the fp32 ONNX graph and its sidecar. ``source_sha256`` names the
    checkpoint (a hash of the module's weights is used when it is empty). Raises
    ExportError when the exporter fails, the graph fails ``onnx.checker`` or
    the interface check, or ONNX Runtime's logits differ from torch's by more
    than ``verify_rtol`` relative to the largest logit (a module that rounds its
    activations to codes, ``rounds_activations``, is checked without the rounding,
    ``module.without_rounding()``).
    """
    torch = require("torch", feature="ONNX export")
    onnx = require("onnx", feature="ONNX export")
    ort = require("onnxruntime", feature="verifying the ONNX export")
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)

    module.eval()
    two_heads = heads_module(module)
    wrapper = two_heads if two_heads is not None else logits_module(module)
    output_names = [OUTPUT_NAME, CASE_OUTPUT_NAME] if two_heads is not None else [OUTPUT_NAME]
    vocab = vocab_size_of(module)
    trace_ids, trace_mask = sample_batch(2, 16, vocab, seed=0)
    reference = _torch_logits(wrapper, trace_ids, trace_mask)
    if reference.ndim != 3 or reference.shape[:2] != trace_ids.shape:
        raise ExportError(
            f"module returned shape {reference.shape} for input {trace_ids.shape}; "
            "expected logits [batch, seq, C]"
        )
    # A module that rounds its activations to codes (emulated int8) is a step function: a
    # float ulp between torch and ONNX Runtime moves a code here and there, and each move
    # shows in many tokens. Its graph is checked without the rounding (the same graph but
    # for the Round nodes, a continuous function), then traced as it is.
    stepped = bool(getattr(module, "rounds_activations", False))
    if stepped:
        with tempfile.TemporaryDirectory() as tmp, module.without_rounding():
            smooth = Path(tmp) / out_path.name
            _trace(torch, wrapper, smooth, trace_ids, trace_mask, output_names, opset)
            _check_graph(onnx, smooth)
            _verify(ort, smooth, wrapper, output_names, vocab, verify_rtol)
    _trace(torch, wrapper, out_path, trace_ids, trace_mask, output_names, opset)
    inputs, outputs = _check_graph(onnx, out_path)
    worst_abs, worst_rel = _verify(ort, out_path, wrapper, output_names, vocab, None if stepped else verify_rtol)

    sidecar = new_sidecar(
        out_path,
        backend="onnxruntime",
        precision="fp32",
        inputs=inputs,
        outputs=outputs,
        source_sha256=source_sha256 or weights_sha256(module),
        recipe={"method": "torch.onnx.export (TorchScript, dynamo=False)", "opset": opset},
    )
    write_sidecar(sidecar, out_path)
    logger.info("exported %s (opset %d, max rel diff %.2e)", out_path, opset, worst_rel)
    return ExportResult(out_path, sidecar, worst_abs, worst_rel, int(outputs[0].shape[2]))
