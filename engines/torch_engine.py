"""The torch backend: runs a token classifier module directly (reference and training use).

It stays independent of the training package: the module comes in as
``module=`` or from a ``loader=`` callable (for instance
``training.checkpoint.load_checkpoint``) that maps the model folder to a
module or to ``(module, metadata)``. Labels, label position and window come
from that metadata, from ``metadata=``, or from the folder's streampunct.json.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import (
    INPUT_NAMES,
    OUTPUT_NAME,
    ArtifactError,
    EngineError,
    InferenceError,
    IOSpec,
    TensorSpec,
    check_batch,
)
from engines.deps import require
from engines.sidecar import ModelMetadata


def logits_module(module: Any) -> Any:
    """Wrap ``module`` so that forward(input_ids, attention_mask) returns a logits tensor.

    Modules whose forward accepts ``token_type_ids`` (BERT-style) get zeros
    here, so an exported graph has exactly two inputs. Tuple, dict and Hugging
    Face ModelOutput results are reduced to their logits.
    """
    torch = require("torch", feature="the torch engine")
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        params = {}
    wants_token_types = "token_type_ids" in params

    class LogitsOnly(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, input_ids, attention_mask):
            if wants_token_types:
                out = self.inner(
                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    token_type_ids=torch.zeros_like(input_ids),
                )
            else:
                out = self.inner(input_ids, attention_mask)
            if isinstance(out, torch.Tensor):
                return out
            if hasattr(out, "logits"):
                return out.logits
            if isinstance(out, Mapping):
                return out["logits"]
            if isinstance(out, tuple | list):
                return out[0]
            raise EngineError(f"module returned {type(out).__name__}, expected a logits tensor")

    return LogitsOnly().eval()


@dataclass(frozen=True)
class TorchOptions:
    """Options of the torch backend.

    Attributes:
        module: a module with forward(input_ids, attention_mask) -> logits.
        loader: called with the model folder when ``module`` is None; returns a
            module or ``(module, metadata)``.
        metadata: labels / label_position / window (overrides the loader's).
        device: torch device string.
        threads: torch intra-op threads (process-wide); None leaves torch's default.
    """

    module: Any = None
    loader: Callable[[Path], Any] | None = None
    metadata: Mapping[str, Any] | None = None
    device: str = "cpu"
    threads: int | None = None


class TorchEngine:
    """A torch module behind the Engine protocol (fp32, no artifact)."""

    name = "torch"

    def __init__(
        self,
        module: Any,
        metadata: ModelMetadata | Mapping[str, Any],
        *,
        device: str = "cpu",
        threads: int | None = None,
    ) -> None:
        torch = require("torch", feature="the torch engine")
        if threads is not None:
            torch.set_num_threads(threads)
        self._torch = torch
        self.device = torch.device(device)
        self.metadata = (
            metadata if isinstance(metadata, ModelMetadata) else ModelMetadata.from_dict(metadata)
        )
        self._module = logits_module(module.to(self.device).eval())

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """int64[B,T], int64[B,T] -> float32[B,T,C]."""
        ids, mask = check_batch(input_ids, attention_mask)
        if self._module is None:
            raise InferenceError("torch engine is closed")
        torch = self._torch
        with torch.inference_mode():
            out = self._module(
                torch.from_numpy(ids).to(self.device), torch.from_numpy(mask).to(self.device)
            )
        logits = out.float().cpu().numpy()
        if logits.shape[:2] != ids.shape:
            raise InferenceError(f"module returned shape {logits.shape} for input {ids.shape}")
        return logits

    def io_spec(self) -> IOSpec:
        dyn = ("batch", "sequence")
        return IOSpec(
            backend="torch",
            artifact="",
            precision="fp32",
            inputs=tuple(TensorSpec(n, "int64", dyn) for n in INPUT_NAMES),
            outputs=(TensorSpec(OUTPUT_NAME, "float32", (*dyn, len(self.metadata.labels))),),
            labels=self.metadata.labels,
            label_position=self.metadata.label_position,
            window=self.metadata.window,
        )

    def close(self) -> None:
        self._module = None


def open_engine(model_dir: Path, artifact: Path | None, options: Mapping[str, Any]) -> TorchEngine:
    """Registry entry point: ``load_engine("torch", dir, module=... | loader=...)``."""
    from engines.registry import make_options, read_model_metadata

    opts: TorchOptions = make_options(TorchOptions, options, "torch")
    module, metadata = opts.module, opts.metadata
    if module is None:
        if opts.loader is None:
            raise EngineError(
                "the torch backend needs module= or loader= (for a training checkpoint: "
                "loader=training.checkpoint.load_checkpoint)"
            )
        loaded = opts.loader(model_dir)
        if isinstance(loaded, tuple):
            module, loaded_meta = loaded
            metadata = metadata if metadata is not None else loaded_meta
        else:
            module = loaded
    if metadata is None:
        metadata = read_model_metadata(model_dir)
    try:
        meta = ModelMetadata.from_dict(metadata)
    except ArtifactError as e:
        raise ArtifactError(
            f"torch backend: no usable labels/label_position/window for {model_dir}: {e}"
        ) from e
    return TorchEngine(module, meta, device=opts.device, threads=opts.threads)
