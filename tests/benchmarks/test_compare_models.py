"""``python -m benchmarks.compare_models``: a model folder that is missing or broken is one line
``error: ...`` and exit status 2, before any validation data is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.compare_models import main

DEFAULT = Path(__file__).resolve().parents[2] / "models" / "default"


@pytest.fixture(autouse=True)
def no_data(monkeypatch):
    import training.data

    monkeypatch.setattr(training.data, "load_validation_docs", lambda *a, **k: pytest.fail("data loaded"))


def test_a_missing_model_folder_is_one_line(tmp_path, capsys):
    missing = tmp_path / "nonexist"
    assert main([str(missing), str(DEFAULT)]) == 2
    assert capsys.readouterr().err == f"error: model folder {missing} does not exist\n"


def test_a_model_folder_with_bad_json_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "streampunct.json").write_text("{bad")
    assert main([str(DEFAULT), str(bad)]) == 2
    assert capsys.readouterr().err == (f"error: {bad / 'streampunct.json'}: invalid JSON (Expecting property name "
                                       "enclosed in double quotes: line 1 column 2 (char 1))\n")
