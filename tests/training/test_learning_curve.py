"""``python -m training.learning_curve``: a run's curve as JSON and PNG; a folder that is not a
run (no metrics.jsonl, or no validation in it yet) or a bad --compare is one line and exit 2."""

import json

import pytest

from training.learning_curve import main

PROG = "python -m training.learning_curve: error: "


def write_metrics(run, *records):
    run.mkdir(parents=True, exist_ok=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run


VALID = [{"type": "valid", "step": s, "words_seen": 1000 * s, "overall_f1": f,
          "per_class": {"COMMA": {"f1": f - 5}, "PERIOD": {"f1": f + 5}}} for s, f in ((10, 50.0), (20, 60.0))]


def one_line_error(capsys):
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith(PROG) and err.count("\n") == 1, err
    return err


def test_a_folder_without_metrics_is_refused_in_one_line(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert f"no metrics.jsonl in {tmp_path} (a training run's output folder)" in one_line_error(capsys)
    assert main([str(tmp_path / "absent")]) == 2
    assert "(a training run's output folder): it does not exist" in one_line_error(capsys)
    assert not (tmp_path / "learning_curve.json").exists()


@pytest.mark.parametrize("records", [[], [{"type": "config"}, {"type": "train", "step": 5, "loss": 1.0}]])
def test_metrics_without_a_validation_are_refused_in_one_line(tmp_path, capsys, records):
    run = write_metrics(tmp_path / "run", *records)
    assert main([str(run)]) == 2
    assert "metrics.jsonl has no validation records" in one_line_error(capsys)
    assert not (run / "learning_curve.json").exists()


def test_a_bad_compare_is_refused_in_one_line(tmp_path, capsys):
    run = write_metrics(tmp_path / "run", *VALID)
    assert main([str(run), "--compare", str(tmp_path / "absent.json")]) == 2
    assert "--compare" in one_line_error(capsys)
    (tmp_path / "bad.json").write_text("{}")
    assert main([str(run), "--compare", str(tmp_path / "bad.json")]) == 2
    assert "not a curve JSON" in one_line_error(capsys)


def test_a_run_gets_its_curve(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    run = write_metrics(tmp_path / "run", {"type": "config"}, VALID[0], {"type": "train", "step": 15}, VALID[1])
    assert main([str(run)]) == 0
    curve = json.loads((run / "learning_curve.json").read_text())
    assert [p["step"] for p in curve["points"]] == [10, 20] and curve["points"][1]["PERIOD_f1"] == 65.0
    assert (run / "learning_curve.png").is_file()
    assert "2 points" in capsys.readouterr().out
    assert main([str(run), "--compare", str(run / "learning_curve.json"), "--out", str(tmp_path / "c")]) == 0
    assert (tmp_path / "c.png").is_file()
