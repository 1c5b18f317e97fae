"""``python -m training.window_tuning``'s refusals: one line on stderr and exit status 2
(no traceback), before any data is loaded where the model folder is at fault; argument
problems are usage errors naming the flags. Valid arguments still tune and write."""

import json

import pytest

import training.data
from training import window_tuning
from training.window_tuning import main, window_grid

PROG = "python -m training.window_tuning: error: "


def model_folder(path, **meta):
    path.mkdir(parents=True)
    (path / "streampunct.json").write_text(json.dumps(
        {"window": {"size": 126, "left": 40, "right": 10}, "max_word_tokens": 16, **meta}))
    return path


@pytest.fixture
def no_data(monkeypatch):
    """Fails the test if any validation data is loaded."""
    def load(*a, **k):
        raise AssertionError("validation data loaded")

    monkeypatch.setattr(training.data, "load_validation_docs", load)


def one_line_error(capsys, *parts):
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.startswith(PROG) and err.count("\n") == 1, err
    for part in parts:
        assert part in err
    return err


@pytest.mark.parametrize("mode", [[], ["--stream-lefts", "20"], ["--stream-cache-tokens", "10"]])
def test_a_test_set_is_refused_in_one_line(tmp_path, capsys, mode):
    folder = model_folder(tmp_path / "m", stream_artifact="model.stream.int8.onnx")
    (folder / "model.stream.int8.onnx").write_bytes(b"")
    argv = [str(folder), "--valid", "data/iwslt2011/test2011", "--data-root", str(tmp_path), *mode]
    assert main(argv) == 2
    one_line_error(capsys, "test2011 is a test set: never train or select models on it")


@pytest.mark.parametrize("mode", [[], ["--stream-lefts", "20"]])
def test_a_missing_model_folder_is_refused_before_loading_data(tmp_path, capsys, no_data, mode):
    assert main([str(tmp_path / "absent"), "--data-root", str(tmp_path), *mode]) == 2
    one_line_error(capsys, f"model folder {tmp_path / 'absent'} does not exist")
    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty"), "--data-root", str(tmp_path), *mode]) == 2
    one_line_error(capsys, "is not a streampunct model folder: no streampunct.json")


def test_a_missing_data_folder_is_refused_in_one_line(tmp_path, capsys):
    folder = model_folder(tmp_path / "m")
    assert main([str(folder), "--data-root", str(tmp_path / "none")]) == 2
    one_line_error(capsys, f"data folder {tmp_path / 'none'} does not exist")


def usage_error(capsys, argv):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.splitlines()[-1]


def test_a_grid_without_a_valid_window_is_a_usage_error(tmp_path, capsys, no_data):
    folder = model_folder(tmp_path / "m")
    line = usage_error(capsys, [str(folder), "--sizes", "10", "--lefts", "20", "--data-root", str(tmp_path)])
    assert line.startswith(PROG) and "--sizes 10 --lefts 20 --rights 10 15 20 give no valid window" in line


@pytest.mark.parametrize("left, why", [("-5", "overlaps must be >= 0"), ("500", "window size 126 is too small")])
def test_a_stream_left_that_does_not_fit_is_a_usage_error(tmp_path, capsys, no_data, left, why):
    folder = model_folder(tmp_path / "m")
    line = usage_error(capsys, [str(folder), "--stream-lefts", "20", left, "--data-root", str(tmp_path)])
    assert line.startswith(f"{PROG}--stream-lefts {left}: ") and why in line
    assert "left from 0 to 84" in line  # 126 - 10 - 2 x 16


def test_a_negative_tolerance_is_a_usage_error(tmp_path, capsys, no_data):
    line = usage_error(capsys, [str(model_folder(tmp_path / "m")), "--tolerance", "-1"])
    assert line == f"{PROG}--tolerance must be >= 0, got -1"


def test_valid_arguments_still_tune(tmp_path, capsys, monkeypatch):
    folder = model_folder(tmp_path / "m")
    loaded, calls = [], []
    monkeypatch.setattr(training.data, "load_validation_docs", lambda s, root, cache: loaded.append(s) or ["doc"])
    monkeypatch.setattr(window_tuning, "tune_model_folder",
                        lambda d, docs, grid, **k: calls.append((d, docs, grid, k)) or {"size": 94})
    monkeypatch.setattr(window_tuning, "tune_stream_left",
                        lambda d, docs, lefts, **k: calls.append((d, docs, lefts, k)) or {"left": 20})
    argv = [str(folder), "--sizes", "10", "126", "--lefts", "20", "--rights", "10", "--data-root", str(tmp_path)]
    assert main(argv) == 0
    assert loaded == ["dev2010"]
    assert calls[-1] == (folder, ["doc"], window_grid([10, 126], [20], [10], 16),
                         {"set_name": "dev2010", "tolerance": 0.5})
    assert "chosen window: {'size': 94}" in capsys.readouterr().out
    assert main([str(folder), "--stream-lefts", "20", "84", "--valid", "swda_val", "--data-root", str(tmp_path)]) == 0
    assert calls[-1] == (folder, ["doc"], [20, 84], {"set_name": "swda_val", "tolerance": 0.5})
    assert "chosen stream_window: {'left': 20}" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "line"), [
    (["--sizes", "0"], "argument --sizes: must be >= 1, got 0"),
    (["--sizes", "62", "-4"], "argument --sizes: must be >= 1, got -4"),
    (["--lefts", "-1"], "argument --lefts: must be >= 0, got -1"),
    (["--rights", "-2"], "argument --rights: must be >= 0, got -2"),
])
def test_a_window_size_below_1_or_a_negative_overlap_is_a_usage_error(tmp_path, capsys, no_data, argv, line):
    assert usage_error(capsys, [str(model_folder(tmp_path / "m")), *argv]) == f"{PROG}{line}"
