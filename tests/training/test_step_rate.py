"""training.step_rate: a measured step rate that sizes a run to a time budget."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from training.step_rate import main, measure  # noqa: E402


def test_measure_reports_the_shape_it_timed(tiny_base_model):
    r = measure(tiny_base_model, batch_size=2, max_len=16, case_head=True, steps=3, warmup=1, device="cpu")
    assert r["device"] == "cpu" and r["precision"] == "fp32"
    assert (r["batch_size"], r["max_len"], r["steps"], r["case_head"]) == (2, 16, 3, True)
    assert r["seconds"] > 0
    # seconds is rounded to the millisecond: steps = rate x seconds within that rounding
    assert abs(r["steps_per_s"] * r["seconds"] - 3) <= r["steps_per_s"] * 0.0005 + 0.01
    assert r["tokens_per_s"] == pytest.approx(r["steps_per_s"] * 2 * 16, rel=0.01)


def test_bf16_on_a_cpu_without_native_bf16_is_measured_in_fp32(tiny_base_model, monkeypatch):
    import training.precision as precision

    monkeypatch.setattr(precision, "_cpu_native_bf16", lambda: False)
    r = measure(tiny_base_model, batch_size=1, max_len=8, precision="bf16", steps=1, warmup=0, device="cpu")
    assert r["precision"] == "fp32"


def test_cli_writes_the_json(tiny_base_model, tmp_path, capsys):
    out = tmp_path / "rate.json"
    assert main(["--base-model", str(tiny_base_model), "--batch-size", "2", "--max-len", "8", "--steps", "2",
                 "--warmup", "0", "--device", "cpu", "--json", str(out)]) == 0
    written = json.loads(out.read_text())
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert written == printed and written["steps"] == 2


def test_cli_rejects_a_folder_without_a_config(tmp_path, capsys):
    assert main(["--base-model", str(tmp_path), "--steps", "1", "--device", "cpu"]) != 0
    assert "config" in capsys.readouterr().err.lower()
