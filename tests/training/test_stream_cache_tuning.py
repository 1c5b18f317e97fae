"""The cache length rule (training.window_tuning.choose_stream_cache) and its tuning step,
with a stand-in score (no model): what it chooses, what it writes, what it refuses."""

import json
from pathlib import Path

import pytest

from streampunct.errors import InputError
from training.data import Document
from training.window_tuning import (
    STREAM_CACHE_SETS,
    choose_stream_cache,
    main,
    tune_stream_cache,
)

REPO = Path(__file__).resolve().parents[2]
SETS = ["dev2010", "swda_val"]
# Release 6's hand tuning (models/default/streampunct.json, stream_cache_tuning; RULE.md).
SHIPPED_WITHOUT = {"dev2010": 66.78, "swda_val": 76.43}
SHIPPED = {25: (66.96, 75.91), 40: (67.11, 76.20), 60: (67.28, 76.92), 80: (67.07, 77.04), 100: (67.28, 76.85)}


def grid_of(figures):
    return [{"tokens": t, **dict(zip(SETS, f, strict=True))} for t, f in figures.items()]


def test_on_the_shipped_grid_the_rule_chooses_60():
    choice = choose_stream_cache(grid_of(SHIPPED), SHIPPED_WITHOUT, SETS)
    assert choice.tokens == 60 and choice.enabled and choice.failing == ()
    assert choice.best_mean == pytest.approx(72.10)
    assert choice.near == (60, 80, 100)  # 72.055 and 72.065 lie within 0.1 of 72.10
    assert STREAM_CACHE_SETS == ("dev2010", "swda_val")


def test_the_fewest_tokens_within_the_tolerance_of_the_best_mean():
    figures = {20: (70.0, 70.0), 40: (70.3, 70.3), 80: (70.4, 70.4), 160: (70.0, 70.8)}
    # means 70.0, 70.3, 70.4, 70.4: 40 lies 0.1 under the best (within, float noise aside)
    assert choose_stream_cache(grid_of(figures), {"dev2010": 70, "swda_val": 70}, SETS).tokens == 40
    # the mean of the sets, not one set (160 is best on swda_val alone); 80 and 160 tie: fewer tokens
    assert choose_stream_cache(grid_of(figures), {"dev2010": 70, "swda_val": 70}, SETS,
                               tolerance=0.0).tokens == 80
    assert choose_stream_cache(grid_of(figures), {"dev2010": 70, "swda_val": 70}, SETS,
                               tolerance=0.5).tokens == 20
    only = choose_stream_cache([{"tokens": 8, "a": 50.0}, {"tokens": 4, "a": 51.0}], {"a": 0.0}, ["a"])
    assert only.tokens == 4 and only.means == {8: 50.0, 4: 51.0}


def test_the_guard_keeps_a_cache_that_loses_on_one_set_off():
    # the 25-token candidate alone: dev2010 +0.18, SwDA validation -0.52 (RULE.md's first candidate)
    choice = choose_stream_cache(grid_of({25: SHIPPED[25]}), SHIPPED_WITHOUT, SETS)
    assert choice.tokens == 25 and not choice.enabled and choice.failing == ("swda_val",)
    # exactly 0.3 under passes; 0.31 under fails
    at = choose_stream_cache([{"tokens": 5, "dev2010": 66.48, "swda_val": 76.43}], SHIPPED_WITHOUT, SETS)
    assert at.enabled
    under = choose_stream_cache([{"tokens": 5, "dev2010": 66.47, "swda_val": 80.0}], SHIPPED_WITHOUT, SETS)
    assert not under.enabled and under.failing == ("dev2010",)


@pytest.mark.parametrize("grid, without, match", [
    ([], SHIPPED_WITHOUT, "empty"),
    ([{"tokens": 5, "dev2010": 1.0}], SHIPPED_WITHOUT, "no figure for swda_val"),
    ([{"tokens": 5, "dev2010": 1.0, "swda_val": 1.0}], {"dev2010": 1.0}, "without the cache for swda_val"),
    ([{"tokens": 0, "dev2010": 1.0, "swda_val": 1.0}], SHIPPED_WITHOUT, "positive"),
    ([{"tokens": 5, "dev2010": 1.0, "swda_val": 1.0}] * 2, SHIPPED_WITHOUT, "twice"),
])
def test_bad_grids_are_refused(grid, without, match):
    with pytest.raises(ValueError, match=match):
        choose_stream_cache(grid, without, SETS)


def stream_folder(path: Path, **meta) -> Path:
    """A model folder whose streampunct.json names a streaming graph (a stand-in file: the
    score is injected, so no engine is opened)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "model.stream.int8.onnx").write_bytes(b"")
    (path / "streampunct.json").write_text(json.dumps({"stream_artifact": "model.stream.int8.onnx", **meta}))
    return path


def docs_of(sets):
    return {s: [Document(s, ["a", "b"], [0, 2])] for s in sets}


def test_tuning_writes_the_shipped_structure(tmp_path):
    folder = stream_folder(tmp_path / "m", stream_cache=False, name="kept")
    calls = []

    def score(set_name, tokens):
        calls.append((set_name, tokens))
        return SHIPPED_WITHOUT[set_name] if tokens is None else SHIPPED[tokens][SETS.index(set_name)]

    choice = tune_stream_cache(folder, docs_of(SETS), [100, 25, 60, 40, 80, 60], score=score)
    assert choice.tokens == 60 and choice.enabled
    assert calls[:2] == [("dev2010", None), ("swda_val", None)] and len(calls) == 2 + 2 * 5
    meta = json.loads((folder / "streampunct.json").read_text())
    assert meta["stream_cache_tokens"] == 60 and meta["name"] == "kept"
    assert "stream_cache" not in meta  # the guard passed: auto uses the cache again
    tuning = meta["stream_cache_tuning"]
    shipped = json.loads((REPO / "models" / "default" / "streampunct.json").read_text())["stream_cache_tuning"]
    assert sorted(tuning) == sorted(shipped)  # set, stream, without_cache, grid, chosen, rule
    for key in ("set", "without_cache", "grid", "chosen"):
        assert tuning[key] == shipped[key], key
    assert tuning["stream"].startswith("one live stream each: 1-4-word chunks at 2.5 words/s")
    assert "within 0.1" in tuning["rule"] and "(60, 80, 100)" in tuning["rule"] and "(passed)" in tuning["rule"]


def test_a_guard_failure_writes_the_tokens_and_switches_auto_off(tmp_path):
    from streampunct.model import load_model_info

    folder = stream_folder(tmp_path / "m")

    def score(set_name, tokens):
        return {None: 70.0, 10: 70.5, 20: 69.0}[tokens] - (1.0 if set_name == "swda_val" and tokens else 0.0)

    choice = tune_stream_cache(folder, docs_of(SETS), [10, 20], score=score)
    assert choice.tokens == 10 and not choice.enabled and choice.failing == ("swda_val",)
    meta = json.loads((folder / "streampunct.json").read_text())
    assert meta["stream_cache_tokens"] == 10 and meta["stream_cache"] is False
    assert "failed on swda_val" in meta["stream_cache_tuning"]["rule"]
    assert not load_model_info(folder).stream_cache_auto


def test_a_folder_without_a_streaming_graph_is_refused(tmp_path, capsys):
    folder = tmp_path / "plain"
    folder.mkdir()
    (folder / "streampunct.json").write_text("{}")
    with pytest.raises(InputError, match="no streaming graph"):
        tune_stream_cache(folder, docs_of(SETS), [10], score=lambda s, t: 0.0)
    # the CLI says so before it loads any data, with exit code 2
    assert main([str(folder), "--stream-cache-tokens", "10", "--data-root", str(tmp_path / "none")]) == 2
    assert "no streaming graph" in capsys.readouterr().err
    missing = stream_folder(tmp_path / "missing")
    (missing / "model.stream.int8.onnx").unlink()
    with pytest.raises(InputError, match="does not exist"):
        tune_stream_cache(missing, docs_of(SETS), [10], score=lambda s, t: 0.0)
    with pytest.raises(ValueError, match="positive"):
        tune_stream_cache(stream_folder(tmp_path / "ok"), docs_of(SETS), [0], score=lambda s, t: 0.0)


def test_the_cli_takes_one_tuning_at_a_time(tmp_path):
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path), "--stream-lefts", "20", "--stream-cache-tokens", "10"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:  # the window grids take one validation set
        main([str(tmp_path), "--valid", "dev2010", "swda_val", "--stream-lefts", "20"])
    assert e.value.code == 2
