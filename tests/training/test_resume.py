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
    assert signal.getsignal(signal.SIGTERM) != t._on_signal  # handler restored

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


def _two_steps(base, root, out, *extra):
    cfg = tiny_config(base, root, out, "optim.max_steps=2", "optim.epochs=1", *extra)
    return cfg, supervised_trainer(prepare(cfg), out)


def test_resume_refuses_a_config_that_changes_the_model(tiny_base_model, tiny_data_root, tmp_path):
    """A changed [model] (here a case head added) would not fit the saved weights: one line
    naming the key and both values, and config.toml keeps the saved run's config."""
    from streampunct.errors import InputError

    out = tmp_path / "run"
    _two_steps(tiny_base_model, tiny_data_root, out)[1].fit()
    saved_toml = (out / "config.toml").read_text()
    _, t = _two_steps(tiny_base_model, tiny_data_root, out, "model.case_head=true", "optim.lr=1e-3")
    with pytest.raises(InputError, match=r"model\.case_head: saved False, now True.*another --out") as e:
        t.fit(resume=True)
    assert "\n" not in str(e.value) and "optim.lr" not in str(e.value)  # only what shapes the model
    assert (out / "config.toml").read_text() == saved_toml


def test_resume_refusal_is_a_clean_cli_error(tiny_base_model, tiny_data_root, tmp_path, capsys):
    from training.cli import main
    from training.config import config_to_toml

    out = tmp_path / "run"
    cfg, t = _two_steps(tiny_base_model, tiny_data_root, out)
    t.fit()
    config = tmp_path / "c.toml"
    config.write_text(config_to_toml(cfg))
    assert main(["--config", str(config), "--resume", "--set", "model.case_head=true"]) == 2
    err = capsys.readouterr().err
    assert "error: cannot resume" in err and "model.case_head" in err and "Traceback" not in err


def test_resume_warns_about_other_config_changes(tiny_base_model, tiny_data_root, tmp_path, caplog):
    """optim / eval / data changes continue, each logged old -> new; the new config is recorded."""
    out = tmp_path / "run"
    _two_steps(tiny_base_model, tiny_data_root, out)[1].fit()
    cfg = tiny_config(tiny_base_model, tiny_data_root, out, "optim.max_steps=3", "optim.epochs=2",
                      "optim.lr=1e-3", "optim.eval_every=1", "model.dropout=0.2")
    with caplog.at_level("WARNING", logger="training.trainer"):
        result = supervised_trainer(prepare(cfg), out).fit(resume=True)
    assert result.steps == 3
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any("optim.max_steps 2 -> 3" in m for m in warned)
    assert any("optim.epochs 1 -> 2" in m for m in warned)
    assert any("optim.eval_every 0 -> 1" in m for m in warned)
    assert any("model.dropout 0.0 -> 0.2" in m for m in warned)
    assert any("optim.lr 0.003 -> 0.001" in m and "keeps its saved value" in m for m in warned)
    assert not any("optim.seed" in m for m in warned)  # unchanged keys are not listed
    assert "max_steps = 3" in (out / "config.toml").read_text()


def test_resume_state_without_a_config_record_still_fails_cleanly(tiny_base_model, tiny_data_root, tmp_path):
    """Older resume states carry no config: weights that do not fit are an InputError, not a
    raw `RuntimeError: Missing key(s) in state_dict`."""
    from streampunct.errors import InputError

    out = tmp_path / "run"
    _two_steps(tiny_base_model, tiny_data_root, out)[1].fit()
    payload = torch.load(out / "state.pt", weights_only=False)
    del payload["config"]
    torch.save(payload, out / "state.pt")
    _, t = _two_steps(tiny_base_model, tiny_data_root, out, "model.case_head=true")
    with pytest.raises(InputError, match="do not fit the model"):
        t.fit(resume=True)


def _valid_steps(out):
    return [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
            if json.loads(line)["type"] == "valid"]


def test_a_stop_in_the_last_step_still_validates_that_step_on_resume(tiny_base_model, tiny_data_root, tmp_path):
    # the stop came before the end-of-run validation; the resumed run's loop had no step left to run
    whole = tmp_path / "whole"
    trainer_for(tiny_base_model, tiny_data_root, whole).fit()
    cut = tmp_path / "cut"
    t = trainer_for(tiny_base_model, tiny_data_root, cut)
    t.on_step = lambda state: state.step == 12 and os.kill(os.getpid(), signal.SIGTERM)
    with pytest.raises(TrainingInterrupted, match="interrupted at step 12"):
        t.fit()
    trainer_for(tiny_base_model, tiny_data_root, cut).fit(resume=True)
    assert _valid_steps(cut) == _valid_steps(whole) and _valid_steps(cut)[-1] == 12


def test_a_run_ended_by_stop_step_continues_its_epoch_when_resumed(tiny_base_model, tiny_data_root, tmp_path):
    # stop_step ended the run mid-epoch; --resume without it went on from the next epoch's start
    whole = tmp_path / "whole"
    trainer_for(tiny_base_model, tiny_data_root, whole).fit()
    cut = tmp_path / "cut"
    cfg = tiny_config(tiny_base_model, tiny_data_root, cut, *EXTRA, "optim.stop_step=5")
    supervised_trainer(prepare(cfg), cut).fit()
    assert trainer_for(tiny_base_model, tiny_data_root, cut).fit(resume=True).steps == 12
    a, b = final_weights(whole), final_weights(cut)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-6, msg=k)


def test_a_damaged_resume_state_is_one_line(tiny_base_model, tiny_data_root, tmp_path):
    from streampunct.errors import InputError

    out = tmp_path / "run"
    _two_steps(tiny_base_model, tiny_data_root, out)[1].fit()
    state = out / "state.pt"
    for damage in (state.read_bytes()[:100], b"garbage", b""):
        state.write_bytes(damage)
        with pytest.raises(InputError, match=rf"^cannot resume {state}: the file is damaged \(.*\); remove it"):
            _two_steps(tiny_base_model, tiny_data_root, out)[1].fit(resume=True)


def test_a_run_that_starts_over_keeps_no_earlier_attempts_records(tiny_base_model, tiny_data_root, tmp_path):
    # killed before its first resume state: --resume starts over, and its log is one run's
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"type": "start"}\n{"type": "train", "step": 1}\n')
    _two_steps(tiny_base_model, tiny_data_root, out)[1].fit(resume=True)
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["type"] for r in records].count("start") == 1
    assert [r["step"] for r in records if r["type"] == "train"] == [1, 2]


def test_the_window_tuning_after_the_loop_runs_under_the_callers_signal_handlers(tiny_base_model, tiny_data_root,
                                                                                 tmp_path, monkeypatch):
    # a SIGTERM there was taken for "stop after this step" and then ignored for the whole grid;
    # the state is written by then, so the caller's handlers (a plain stop) apply, and --resume tunes
    out = tmp_path / "run"
    _, t = _two_steps(tiny_base_model, tiny_data_root, out)
    seen = []
    finish = t.finish
    monkeypatch.setattr(t, "finish", lambda elapsed: seen.append(signal.getsignal(signal.SIGTERM)) or finish(elapsed))
    t.fit()
    assert len(seen) == 1 and seen[0] != t._on_signal
    assert torch.load(out / "state.pt", weights_only=False)["state"]["step"] == 2
