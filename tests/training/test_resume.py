"""Resumable runs: a run stopped by SIGTERM and resumed ends with the weights of an uninterrupted one."""

import json
import os
import signal

import pytest

torch = pytest.importorskip("torch")

from training.pipeline import prepare, supervised_trainer  # noqa: E402
from training.trainer import TrainingInterrupted  # noqa: E402

from .test_train_tiny import tiny_config  # noqa: E402

# Dropout, noise and streaming cuts all draw random numbers: the resumed run must replay them.
EXTRA = ("optim.max_steps=12", "optim.epochs=3", "model.dropout=0.1", "data.noise.share=0.5",
         "data.stream_cut_share=0.5", "model.case_head=true", 'data.train=["dev2012", "ted"]')


def trainer_for(base, root, out):
    cfg = tiny_config(base, root, out, *EXTRA)
    return supervised_trainer(prepare(cfg), out)


def final_weights(out):
    return torch.load(out / "state.pt", weights_only=False)["model"]


def test_sigterm_then_resume_gives_the_uninterrupted_weights(tiny_base_model, tiny_data_root, tmp_path):
    whole = tmp_path / "whole"
    result = trainer_for(tiny_base_model, tiny_data_root, whole).fit()
    assert result.steps == 12

    cut = tmp_path / "cut"
    t = trainer_for(tiny_base_model, tiny_data_root, cut)

    def kill_at_5(state):
        if state.step == 5:
            os.kill(os.getpid(), signal.SIGTERM)  # the real handler: finish the step, save, stop

    t.on_step = kill_at_5
    with pytest.raises(TrainingInterrupted, match="interrupted at step 5"):
        t.fit()
    assert torch.load(cut / "state.pt", weights_only=False)["state"]["step"] == 5
    assert signal.getsignal(signal.SIGTERM) is not t._on_signal  # handler restored

    resumed = trainer_for(tiny_base_model, tiny_data_root, cut).fit(resume=True)
    assert resumed.steps == 12
    a, b = final_weights(whole), final_weights(cut)
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)
    # the metrics log reads as one run: each training step logged once
    steps = [json.loads(line)["step"] for line in (cut / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["type"] == "train"]
    assert steps == list(range(1, 13))


def test_time_based_checkpoint(tiny_base_model, tiny_data_root, tmp_path):
    out = tmp_path / "timed"
    cfg = tiny_config(tiny_base_model, tiny_data_root, out, "optim.max_steps=3",
                      "optim.checkpoint_minutes=1e-9")
    t = supervised_trainer(prepare(cfg), out)
    seen = []
    t.on_step = lambda s: seen.append(torch.load(out / "state.pt", weights_only=False)["state"]["step"])
    t.fit()
    assert seen == [1, 2, 3]  # every step was past the (tiny) interval


def test_a_torn_state_write_keeps_the_last_good_state(tiny_base_model, tiny_data_root, tmp_path, monkeypatch):
    out = tmp_path / "torn"
    cfg = tiny_config(tiny_base_model, tiny_data_root, out, "optim.max_steps=2", "optim.checkpoint_every=1")
    t = supervised_trainer(prepare(cfg), out)
    t.fit()
    good = (out / "state.pt").read_bytes()

    def torn(payload, f):
        f.write(b"half a checkpoint")
        raise KeyboardInterrupt  # killed in the middle of the write

    monkeypatch.setattr(torch, "save", torn)
    with pytest.raises(KeyboardInterrupt):
        t.save_state()
    assert (out / "state.pt").read_bytes() == good
    monkeypatch.undo()
    t2 = supervised_trainer(prepare(cfg), out)
    assert t2.load_state() and t2.state.step == 2


def test_learning_curve_from_the_metrics_log(tiny_base_model, tiny_data_root, tmp_path):
    from training.learning_curve import main

    out = tmp_path / "curve"
    cfg = tiny_config(tiny_base_model, tiny_data_root, out, "optim.max_steps=6", "optim.eval_every=2")
    supervised_trainer(prepare(cfg), out).fit()
    assert main([str(out), "--out", str(tmp_path / "lc")]) == 0
    points = json.loads((tmp_path / "lc.json").read_text())["points"]
    assert [p["step"] for p in points] == [2, 4, 6]
    assert points[0]["words"] > 0 and points[2]["words"] > points[0]["words"]
    assert (tmp_path / "lc.png").stat().st_size > 1000
    # another run's curve drawn on the same axes: the picture changes, the JSON does not
    assert main([str(out), "--out", str(tmp_path / "lc2"), "--compare", str(tmp_path / "lc.json"),
                 "--compare-label", "first try"]) == 0
    assert json.loads((tmp_path / "lc2.json").read_text())["points"] == points
    assert (tmp_path / "lc2.png").read_bytes() != (tmp_path / "lc.png").read_bytes()
