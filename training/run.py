"""``run(cfg)``: train as the config says, dispatching on ``method.kind``.

It sits above both ``training.pipeline`` (supervised and adversarial
trainers) and ``training.self_training`` (which builds on the pipeline), so
neither imports the other's caller.
"""

from __future__ import annotations

from pathlib import Path

from training.config import TrainConfig
from training.pipeline import adversarial_trainer, prepare, supervised_trainer
from training.trainer import RunResult


def default_out_dir(cfg: TrainConfig) -> Path:
    from training.data import REPO_ROOT

    # a folder the command is given is taken from the current directory; the default is the repo's
    return Path(cfg.out).expanduser().absolute() if cfg.out else REPO_ROOT / "checkpoints" / cfg.name


def run(cfg: TrainConfig, out_dir: Path | None = None, *, resume: bool = False) -> RunResult:
    """Train as the config says; returns the best checkpoint and its validation scores."""
    from training.cli_support import check_writable

    out_dir = Path(out_dir) if out_dir is not None else default_out_dir(cfg)
    check_writable(out_dir, "--out", folder=True)  # now, not after the data is read
    kind = cfg.method.kind
    if kind == "self_training":
        from training.self_training import run_self_training

        return run_self_training(cfg, out_dir, resume=resume)
    setup = prepare(cfg)
    trainer = adversarial_trainer(setup, out_dir) if kind == "adversarial" \
        else supervised_trainer(setup, out_dir)
    return trainer.fit(resume=resume)
