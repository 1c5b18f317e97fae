"""A shipped int8 or int4 ONNX model back into a training checkpoint, to continue training it.

The release models keep only their quantized graph: the fp32 weights they were
exported from are not in the repository. :mod:`engines.graph_weights` reads
the graph's initializers, de-quantizes them (per-channel int8 MatMul weights,
8-bit embedding tables; 4-bit block-quantized ``MatMulNBits`` weights and
``GatherBlockQuantized`` embedding tables) and maps them back to the encoder's
parameter names (the torch serving backend reads a model folder the same way).
This module writes them as a checkpoint folder
(``training.checkpoint`` layout) whose logits agree with the graph up to the
quantisation of activations::

    python -m training.onnx_import models/default cache/default_fp32 [--dither 0.5 --seed 0]
    streampunct train --config ... --base-model cache/default_fp32 --set model.init_head=true

``--dither D`` adds uniform noise of +-D quantization steps to every de-quantized
weight. Without it, every imported weight sits on the graph's grid, and an
export of the trained model with the same quantization rounds back to the
graph's code each weight that training moved by less than half a step: the GPU
teacher of 2026-11-26 trained 3,042 steps from ``models/base``'s int4 graph and
exported to 99.85% of its codes, losing the training (docs/training.md,
"Release 7"; ``engines.build.weight_codes`` measures it). With D = 0.5 the rounding
of the export is independent of the old grid, so a weight's expected export is
its trained value (dithered quantization); the price is noise of the size of
one quantization at the start of training.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import numpy as np

from engines.base import ArtifactError
from engines.graph_weights import encoder_config, graph_state_dict, load_graph
from streampunct.errors import InputError, ModelError
from training.cli_support import run_tool

log = logging.getLogger(__name__)


def onnx_state_dict(onnx_path: str | Path, *, dither: float = 0.0, seed: int = 0) -> dict[str, np.ndarray]:
    """``PunctuationModel`` parameter name -> fp32 array (torch layout) from an exported graph
    (:func:`engines.graph_weights.graph_state_dict`); ``dither``: uniform noise of +-dither
    quantization steps on every de-quantized weight."""
    if not 0.0 <= dither <= 0.5:
        raise InputError(f"dither must be between 0 and 0.5 quantization steps, got {dither}")
    try:
        return graph_state_dict(onnx_path, dither=dither, seed=seed)
    except ArtifactError as e:
        raise ModelError(str(e)) from e


def runtime_graph(model_dir: Path) -> Path:
    """The graph a runtime folder serves (streampunct.json's artifact, else the registry's
    defaults), as ``serve`` chooses it; InputError when it has none."""
    from engines.registry import resolve_artifact

    try:
        return resolve_artifact("onnxruntime", model_dir)
    except ArtifactError as e:
        raise InputError(f"{model_dir} has no model.onnx, model.int8.onnx or model.int4.onnx ({e})") from e


def import_runtime_model(model_dir: str | Path, dest: str | Path, *, base_model: str = "",
                         dither: float = 0.0, seed: int = 0) -> Path:
    """Write the graph ``model_dir`` serves (``model.int8.onnx``, ``model.int4.onnx`` or
    ``model.onnx``, chosen as ``serve`` chooses) as a checkpoint folder; ``dither`` as in
    ``onnx_state_dict``."""
    import torch

    from streampunct.model import load_model_info
    from training.checkpoint import save_checkpoint
    from training.model import build_model, resolve_base_model

    model_dir = Path(model_dir)
    graph = runtime_graph(model_dir)
    info = load_model_info(model_dir)
    head = info.metadata.get("head", "linear")
    if head not in ("linear", None):
        raise InputError(f"only linear heads can be imported (this model has {head!r})")
    state = onnx_state_dict(graph, dither=dither, seed=seed)
    case_head = any(k.startswith("case_head.") for k in state)
    # Every parameter comes from the graph: only the encoder's configuration is needed, read
    # from the graph (as the torch serving backend reads it) unless a base model is given.
    if base_model:
        model = build_model(resolve_base_model(base_model), case_head=case_head, random_init=True)
    else:
        from transformers import AutoConfig

        try:
            config = encoder_config(load_graph(graph), state, str(graph))
        except ArtifactError as e:
            raise ModelError(f"{e} (give the encoder's folder with --base-model)") from None
        # dropout for the training this checkpoint continues (the graph's config has none): BERT's and
        # MPNet's own 0.1
        config |= {"hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
        model = build_model(AutoConfig.for_model(**config), case_head=case_head, random_init=True)
    expected = {k for k in model.state_dict() if not k.endswith("position_ids")}
    missing = sorted(expected - state.keys())
    extra = sorted(state.keys() - expected)
    if missing or extra:
        raise ModelError(f"{graph}: parameters missing {missing[:5]}, unexpected {extra[:5]}")
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in state.items()}, strict=False)
    meta = {"label_position": info.label_position,
            "max_word_tokens": info.max_word_tokens,
            "window": info.window.to_dict(),
            "base_model": info.metadata.get("base_model", ""),
            "imported_from": str(graph),
            "import_dither": dither,
            "name": f"imported:{model_dir.name}"}
    path = save_checkpoint(dest, model, info.aligner(), meta)
    log.info("wrote %s from %s (%d tensors)", path, graph, len(state))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.onnx_import", description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", help="runtime model folder (model.int8.onnx or model.int4.onnx + streampunct.json)")
    ap.add_argument("dest", help="checkpoint folder to write")
    ap.add_argument("--base-model", default="",
                    help="encoder folder whose config the graph matches (default: the config read from the graph)")
    ap.add_argument("--dither", type=float, default=0.0,
                    help="uniform noise of +-D quantization steps on each de-quantized weight (0-0.5; 0.5 "
                         "keeps a later export with the same quantization from rounding training away)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the dither noise")
    args = ap.parse_args(argv)
    return run_tool(lambda: import_runtime_model(args.model_dir, args.dest, base_model=args.base_model,
                                                 dither=args.dither, seed=args.seed))


if __name__ == "__main__":
    raise SystemExit(main())
