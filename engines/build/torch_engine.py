"""A torch module behind the Engine protocol: the reference that artifacts are compared with.

It stays independent of the training package: the caller hands in the module
(``build-engine`` loads it with ``training.checkpoint.load_checkpoint``). It
is not the serving backend named ``torch``: that one (:mod:`engines.torch_backend`)
rebuilds a model folder's graph weights in torch.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from engines.base import (
    INPUT_NAMES,
    OUTPUT_NAME,
    EngineBase,
    EngineError,
    InferenceError,
    IOSpec,
    TensorSpec,
    check_batch,
)
from engines.deps import require


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


class TorchEngine(EngineBase):
    """A torch module behind the Engine protocol (fp32, no artifact).

    ``num_labels`` (C) only fills in :meth:`io_spec`; a name keeps the axis symbolic.
    """

    name = "torch"

    def __init__(
        self,
        module: Any,
        *,
        num_labels: int | str = "labels",
        device: str = "cpu",
        threads: int | None = None,
    ) -> None:
        torch = require("torch", feature="the torch engine")
        if threads is not None:
            torch.set_num_threads(threads)
        self._torch = torch
        self.device = torch.device(device)
        self.num_labels = num_labels
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
            outputs=(TensorSpec(OUTPUT_NAME, "float32", (*dyn, self.num_labels)),),
        )

    def close(self) -> None:
        self._module = None
