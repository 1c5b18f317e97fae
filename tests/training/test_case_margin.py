"""The case margin tuning step (training.case_margin): its sweep on a tiny text, its rule,
what it writes into a model folder, and what it refuses."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engines.model_meta import read_model_meta
from streampunct.labels import PERIOD, O
from tests.streampunct.test_case_margin import ChosenEngine
from training.case_margin import DecodedText, choose_margin, decode_text, main, sweep

REPO = Path(__file__).resolve().parents[2]
#: The truth; the engine misses the question mark after "else" and calls "alright" Capitalized weakly
#: (logit lead 1.0 over lower), "john" strongly (5.0), "nasa" ALL CAPS.
TEXT = "Is there anything else? Alright then. Alright, John said NASA.\n"


@pytest.fixture
def punctuator(aligner):
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.core.windowing import WindowConfig

    p = OfflineDecoder(ChosenEngine(aligner), aligner, WindowConfig(48, 8, 6))
    yield p
    p.close()


@pytest.mark.parametrize("decode", ["offline", "live"])
def test_the_sweep_drops_the_missed_periods_capital_and_keeps_the_names(punctuator, decode):
    text = decode_text(punctuator, "tiny", TEXT, decode=decode)
    assert text.words == "is there anything else alright then alright john said nasa".split()
    assert text.labels[5] == PERIOD and text.labels[3] == O
    grid = sweep([text], [0, 0.5, 1, 1.5, 2, 6])
    f1 = {row["margin"]: row["sets"]["tiny"]["mid_sentence_f1"] for row in grid}
    # mid-sentence: capitals on alright (a sentence start the model missed), john and nasa (names)
    assert f1 == {0.0: 80.0, 0.5: 80.0, 1.0: 80.0, 1.5: 100.0, 2.0: 100.0, 6.0: 66.67}  # 6: john dropped too
    starts = {row["margin"]: row["sets"]["tiny"]["sentence_start_capitals_per_1000"] for row in grid}
    assert starts[0.0] == 100.0 and starts[1.5] == 0.0  # one in 10 words, then none
    assert choose_margin(grid) == 1.5  # 1.5 and 2 tie: the smaller


def test_the_rule_takes_the_best_mean_over_the_sets_and_the_smaller_margin_on_ties():
    def row(margin, mean):
        return {"margin": margin, "mean_mid_sentence_f1": mean, "sets": {}}

    assert choose_margin([row(0.0, 80.0), row(1.0, 81.004), row(2.0, 81.0), row(3.0, 80.5)]) == 1.0
    assert choose_margin([row(2.0, 81.0), row(0.5, 81.0)]) == 0.5
    with pytest.raises(ValueError, match="empty margin grid"):
        choose_margin([])


def test_the_mean_is_over_the_sets():
    words = ["a", "b"]
    sure = DecodedText("sure", words, [O, PERIOD], np.array([[0.0, -1, -5, -5], [0.0, 3.0, -5, -5]]),
                       [O, PERIOD], [0, 1])
    weak = DecodedText("weak", words, [O, PERIOD], np.array([[0.0, -1, -5, -5], [0.0, 0.5, -5, -5]]),
                       [PERIOD, PERIOD], [0, 0])
    grid = sweep([sure, weak], [0, 1, 4])
    assert [r["sets"]["sure"]["mid_sentence_f1"] for r in grid] == [100.0, 100.0, 0.0]
    assert [r["sets"]["weak"]["mid_sentence_f1"] for r in grid] == [0.0, 0.0, 0.0]
    assert [r["mean_mid_sentence_f1"] for r in grid] == [50.0, 50.0, 0.0]
    with pytest.raises(ValueError, match="case margin must be"):
        sweep([sure], [-1])


def _folder(tmp_path, monkeypatch, aligner) -> Path:
    """A model folder's metadata, served by the chosen engine instead of its graph."""
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.core.windowing import WindowConfig

    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(REPO / "models" / "default" / "streampunct.json", folder)
    monkeypatch.setattr(OfflineDecoder, "from_model_dir", classmethod(
        lambda cls, model_dir: cls(ChosenEngine(aligner), aligner, WindowConfig(48, 8, 6))))
    return folder


def test_write_stores_the_margin_and_the_grid_and_nothing_else(tmp_path, monkeypatch, aligner, capsys):
    folder = _folder(tmp_path, monkeypatch, aligner)
    before = {k: v for k, v in read_model_meta(folder).to_dict().items() if not k.startswith("case_margin")}
    data = tmp_path / "tiny_dev_cased.txt"
    data.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "grid.json"
    assert main([str(folder), "--data", str(data), "--margins", "0", "1", "2", "--write", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "chosen case_margin 2" in printed and "<- chosen" in printed
    after = read_model_meta(folder).to_dict()
    assert after["case_margin"] == 2.0 and after["case_margin_tuning"]["chosen"] == 2.0
    assert [r["margin"] for r in after["case_margin_tuning"]["grid"]] == [0.0, 1.0, 2.0]
    assert after["case_margin_tuning"]["set"] == "tiny_dev_cased.txt"
    # overall non-lower F1 counts the missed sentence start's capital as right: 4 of 5 capitals shown
    assert after["case_margin_tuning"]["grid"][2]["sets"] == {"tiny_dev_cased": {
        "mid_sentence_f1": 100.0, "sentence_start_capitals_per_1000": 0.0, "non_lower_f1": 88.89}}
    assert {k: v for k, v in after.items() if not k.startswith("case_margin")} == before
    assert json.loads(out.read_text())["chosen"] == 2.0


def test_test_sets_and_models_without_a_case_head_are_refused(tmp_path, monkeypatch, aligner, capsys):
    folder = _folder(tmp_path, monkeypatch, aligner)
    data = tmp_path / "test2011_cased.txt"
    data.write_text(TEXT, encoding="utf-8")
    assert main([str(folder), "--data", str(data)]) == 2
    assert capsys.readouterr().err.strip() == \
        "case_margin: error: test2011_cased.txt is a test set: never tune on it"

    from streampunct.core.decoder import OfflineDecoder
    from streampunct.core.windowing import WindowConfig
    from streampunct.errors import InputError

    class NoCase(ChosenEngine):
        has_case = False

    with pytest.raises(InputError, match="no truecasing head"):
        decode_text(OfflineDecoder(NoCase(aligner), aligner, WindowConfig(48, 8, 6)), "x", TEXT)
