"""Edges of the training command lines: an interrupted ``train`` exits 128 + the signal (as
``build-engine`` does), ``build-engine --out`` refuses a training run's folder, and the recipe's
stages cache converted data in one folder, never the repository's ``cache/`` unless asked."""

from __future__ import annotations

import hashlib
import json
import os
import signal

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from training.data import CACHE_ENV  # noqa: E402

from .test_recipe import TINY, complete_the_corpus  # noqa: E402

# --- train: stopped by a signal -------------------------------------------------------------


def train_argv(base, root, out, *extra):
    config = out.parent / "tiny.toml"
    config.write_text('name = "tiny"\n', encoding="utf-8")
    sets = ["model.random_init=true", "model.dropout=0.0", f'data.cache_dir="{out.parent / "cache"}"',
            "data.max_len=32", "data.max_word_tokens=8", "optim.batch_size=4", "optim.warmup_ratio=0.0",
            "optim.log_every=1", "optim.epochs=50", "optim.checkpoint_every=0", "optim.checkpoint_minutes=0",
            "optim.seed=1", "eval.window_size=30", "eval.window_left=6", "eval.window_right=4", *extra]
    return ["--config", str(config), "--base-model", str(base), "--data-root", str(root), "--out", str(out),
            *(a for s in sets for a in ("--set", s))]


def signal_at_step(monkeypatch, step, *signals):
    """Each trainer sends itself ``signals`` (the real handlers run) once ``step`` is done."""
    from training.trainer import Trainer

    real_init = Trainer.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)

        def on_step(state):
            if state.step == step:
                for sig in signals:
                    os.kill(os.getpid(), sig)

        self.on_step = on_step

    monkeypatch.setattr(Trainer, "__init__", init)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_train_exits_128_plus_the_signal_after_writing_its_resume_state(
        tiny_base_model, tiny_data_root, tmp_path, monkeypatch, capsys, sig):
    from training.cli import main

    out = tmp_path / "run"
    argv = train_argv(tiny_base_model, tiny_data_root, out, "optim.max_steps=4")
    before = signal.getsignal(sig)
    signal_at_step(monkeypatch, 2, sig)
    assert main(argv) == 128 + sig  # 130 / 143, as build-engine and the other commands; 2 is a usage error
    err = capsys.readouterr().err
    assert (f"streampunct train: interrupted at step 2; resume state written to {out / 'state.pt'} "
            "(continue with --resume)") in err
    assert "error:" not in err
    assert signal.getsignal(sig) == before
    assert torch.load(out / "state.pt", weights_only=False)["state"]["step"] == 2
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["type"] == "interrupted" and records[-1]["step"] == 2 and records[-1]["signal"] == sig

    signal_at_step(monkeypatch, -1)  # no signal: the resumed run ends
    assert main([*argv, "--resume"]) == 0
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["type"] == "train"] == [1, 2, 3, 4]
    assert records[-1]["type"] == "done" and records[-1]["steps"] == 4


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_stops_train_at_once_with_the_same_status(tiny_base_model, tiny_data_root, tmp_path,
                                                                   monkeypatch, capsys, sig):
    from training.cli import main

    out = tmp_path / "run"
    signal_at_step(monkeypatch, 1, sig, sig)
    assert main(train_argv(tiny_base_model, tiny_data_root, out, "optim.max_steps=4")) == 128 + sig
    assert not (out / "state.pt").exists()  # stopped at once, before the state of step 1


# --- build-engine: not into a training run's folder -----------------------------------------




def snapshot(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(folder.rglob("*"))}


#: The layouts ``streampunct train --out RUN`` leaves: a run (interrupted before any best, or
#: with its best), a self-training run (its rounds' folders, best/ and its record).
RUN_LAYOUTS = {
    "interrupted": (["state.pt", "metrics.jsonl", "config.toml"], False, "state.pt, metrics.jsonl"),
    "finished": (["state.pt", "metrics.jsonl", "config.toml"], True, "state.pt, metrics.jsonl, best/"),
    "self_training": (["self_training.json"], True, "self_training.json, best/"),
}


@pytest.mark.parametrize("layout", sorted(RUN_LAYOUTS))
def test_build_engine_refuses_a_training_runs_folder_as_out_before_any_work(tiny_checkpoint, tmp_path, monkeypatch,
                                                                            capsys, layout):
    import shutil

    import training.checkpoint
    from streampunct.cli import main as cli

    files, with_best, held = RUN_LAYOUTS[layout]
    run = tmp_path / "run"
    run.mkdir()
    for name in files:
        (run / name).write_text("x\n")
    if with_best:
        shutil.copytree(tiny_checkpoint, run / "best")
    before = snapshot(run)
    monkeypatch.setattr(training.checkpoint, "load_checkpoint",
                        lambda *a, **k: pytest.fail("the checkpoint was loaded"))
    assert cli(["build-engine", "--model", str(run / "best" if with_best else tiny_checkpoint), "--precision", "fp32",
                "--out", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (f"streampunct build-engine: error: --out {run} is a training run's folder (it holds "
                           f"{held}): the build would mix its graph, streampunct.json and tokenizer.json with the "
                           "run's files; write the built folder elsewhere")
    assert snapshot(run) == before  # nothing written, no stage folder left
    assert not (tmp_path / ".run.building").exists()


def test_build_engine_still_builds_into_a_folder_that_merely_holds_a_config(tiny_checkpoint, tmp_path, capsys):
    from streampunct.cli import main as cli

    out = tmp_path / "model"
    out.mkdir()
    (out / "config.toml").write_text("x\n")  # not a run's mark on its own (a user's notes, say)
    assert cli(["build-engine", "--model", str(tiny_checkpoint), "--precision", "fp32", "--parity-lines", "100",
                "--out", str(out)]) == 0
    assert (out / "streampunct.json").is_file() and (out / "config.toml").read_text() == "x\n"


# --- the recipe: one data cache, not the repository's ------------------------------------------


def test_the_recipes_stages_cache_converted_data_in_one_folder_outside_the_repository(
        tiny_checkpoint, tiny_base_model, tiny_data_root, tmp_path, monkeypatch):
    """Without $STREAMPUNCT_CACHE, label and train (and the recipe's checks) cache the converted
    text in OUT/cache, or --cache DIR; nothing lands in the repository's cache/."""
    import training.data
    from training.recipe import main

    monkeypatch.delenv(CACHE_ENV, raising=False)
    repo = tmp_path / "repo"  # the repository's place: its cache/ is watched
    repo.mkdir()
    monkeypatch.setattr(training.data, "REPO_ROOT", repo)
    complete_the_corpus(tiny_data_root)
    out, soft = tmp_path / "release", tmp_path / "soft"
    args = ["--out", str(out), "--data-root", str(tiny_data_root), "--teacher", str(tiny_checkpoint),
            "--soft-labels", str(soft), "--shards", "2", "--in-process",
            "--set", f'model.base_model="{tiny_base_model}"', *(a for s in TINY for a in ("--set", s))]
    assert main([*args, "--only", "label"]) == 0
    assert not (repo / "cache").exists()
    cached = sorted(p.name for p in (out / "cache").iterdir())
    assert any(name.startswith("ted_") for name in cached), cached
    assert json.loads((out / "stages.json").read_text())["recipe"]["cache"] == str(out / "cache")
    assert CACHE_ENV not in os.environ  # put back as it was

    other = tmp_path / "other_cache"
    assert main([*args, "--only", "train", "--cache", str(other)]) == 0  # the trainer's conversions
    assert not (repo / "cache").exists()
    assert any(other.iterdir())
    assert json.loads((out / "stages.json").read_text())["recipe"]["cache"] == str(other)
    assert CACHE_ENV not in os.environ
