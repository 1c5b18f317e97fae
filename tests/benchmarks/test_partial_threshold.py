"""python -m benchmarks.partial_threshold: a schedule replayed into an API stream gives the
messages a client would see, in order; test sets are refused unless reported."""

from __future__ import annotations

import pytest

from benchmarks.live_bench import with_hypotheses
from benchmarks.partial_stability import partial_stability
from benchmarks.partial_threshold import main, replay
from streampunct.core.wire import Final, Partial
from streampunct.evaluation.accuracy import live_schedule
from tests.streampunct.conftest import TEST_WINDOW, FakeEngine


def test_a_replay_gives_every_word_one_final_and_partials_before_it(aligner):
    from streampunct.api import Punctuator

    words = "so we went there and it was fine then we left okay".split()
    events = with_hypotheses(live_schedule(words, seed=1))
    punctuator = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    seen = replay(punctuator.stream(partials=True, capitalize=False), events)
    finals = [m for m in seen if isinstance(m, Final)]
    assert [w.w for f in finals for w in f.words] == words
    assert any(isinstance(m, Partial) for m in seen)
    stability = partial_stability(seen)
    assert stability.words == len(words) and stability.words_shown > 0
    # the fake engine's marks are 0.475 sure: a threshold above holds every one back, finals unchanged
    held = replay(punctuator.stream(partials=True, capitalize=False, partial_mark_threshold=0.5), events)
    assert [m for m in held if isinstance(m, Final)] == finals
    assert all(w.p == "" for m in held if isinstance(m, Partial) for w in (*m.words, *m.hypothesis))


def test_a_test_set_is_refused_without_final_report(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--data", "data/iwslt2011/test2011"])
    assert exc.value.code == 2 and "looks like a test set" in capsys.readouterr().err


def test_only_the_file_name_says_test_set(tmp_path, capsys):
    # a folder named like a test (pytest's own tmp_path) is not a test set: it fails later, on the data
    folder = tmp_path / "tests_of_mine"
    folder.mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["--data", str(folder / "dev.tsv")])
    assert exc.value.code == 2 and "looks like a test set" not in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--data", str(folder / "mrda_test.txt")])
    assert "looks like a test set" in capsys.readouterr().err


def _usage_error(capsys, argv) -> str:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--final-report"])  # tmp_path names "test": not refused as a test set here
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.splitlines()[-1]


def test_a_missing_data_file_is_a_usage_error(tmp_path, capsys):
    line = _usage_error(capsys, ["--data", str(tmp_path / "nonexist")])
    assert line == f"python -m benchmarks.partial_threshold: error: --data: no such file: {tmp_path / 'nonexist'}"


@pytest.mark.parametrize("name", ["empty.txt", "empty.tsv"])
def test_empty_data_is_refused_before_the_model_and_writes_nothing(tmp_path, capsys, monkeypatch, name):
    from streampunct.api import Punctuator

    monkeypatch.setattr(Punctuator, "load", classmethod(lambda *a, **k: pytest.fail("the model was loaded")))
    empty = tmp_path / name
    empty.write_text("")
    out = tmp_path / "pt.json"
    line = _usage_error(capsys, ["--data", str(empty), "--out", str(out)])
    assert line == f"python -m benchmarks.partial_threshold: error: --data: {empty}: no words to score"
    assert not out.exists()


def test_a_missing_model_folder_is_a_usage_error(tmp_path, capsys):
    data = tmp_path / "small.tsv"
    data.write_text("so\tCOMMA\nwhat\tO\n")
    line = _usage_error(capsys, ["--data", str(data), "--model", str(tmp_path / "nomodel")])
    assert line == (f"python -m benchmarks.partial_threshold: error: --model: model folder {tmp_path / 'nomodel'} "
                    "does not exist")
