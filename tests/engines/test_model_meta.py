"""streampunct.json has one owner (engines.model_meta): typed fields, the rest kept as read,
the shipped folders read and write back unchanged, and no other module parses the file."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.base import ArtifactError
from engines.model_meta import (
    METADATA_FILE,
    ModelMeta,
    read_model_meta,
    update_model_meta,
    write_model_meta,
)

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.parent for p in (REPO / "models").glob(f"*/{METADATA_FILE}"))


@pytest.mark.parametrize("folder", SHIPPED, ids=[p.name for p in SHIPPED])
def test_shipped_folders_read_and_write_back_unchanged(folder, tmp_path):
    raw = json.loads((folder / METADATA_FILE).read_text(encoding="utf-8"))
    meta = read_model_meta(folder)
    assert meta.to_dict() == raw
    assert meta.artifact == raw["artifact"] and meta.stream_artifact == raw["stream_artifact"]
    assert meta.window == raw["window"] and meta.stream_window == raw["stream_window"]
    assert meta.get("validation") == raw["validation"] and meta.get("training_config") == raw["training_config"]
    write_model_meta(tmp_path, meta)
    assert json.loads((tmp_path / METADATA_FILE).read_text(encoding="utf-8")) == raw
    assert sorted(p.name for p in tmp_path.iterdir()) == [METADATA_FILE]  # no temporary file left


def test_the_runtime_view_of_the_shipped_default_is_unchanged():
    """What load_model_info made of models/default before the schema (its values, written out)."""
    from streampunct.core.windowing import WindowConfig
    from streampunct.model import load_model_info

    info = load_model_info(REPO / "models" / "default")
    raw = json.loads((REPO / "models" / "default" / METADATA_FILE).read_text(encoding="utf-8"))
    window = WindowConfig(**{k: raw["window"][k] for k in ("size", "left", "right")})
    assert (info.name, info.labels, info.label_position, info.max_word_tokens) == (
        raw["name"], ("O", "COMMA", "PERIOD", "QUESTION"), "last", 16)
    assert info.window == window
    assert info.stream_window == WindowConfig(window.size, raw["stream_window"]["left"], window.right)
    assert info.stream_cache_auto and info.meta.stream_cache_tokens == raw["stream_cache_tokens"]
    assert info.metadata == raw


def test_absent_keys_stay_absent_and_unknown_keys_are_kept(tmp_path):
    write_model_meta(tmp_path, {"labels": ["O", "COMMA", "PERIOD", "QUESTION"], "head": "linear",
                                "my_note": {"a": [1, 2]}})
    meta = read_model_meta(tmp_path)
    assert meta.window is None and meta.stream_cache is None and meta.label_position is None
    assert meta.record == {"head": "linear", "my_note": {"a": [1, 2]}}
    meta = update_model_meta(tmp_path, stream_artifact="model.stream.int8.onnx", my_note=None, grid=[3])
    assert json.loads((tmp_path / METADATA_FILE).read_text()) == {
        "labels": ["O", "COMMA", "PERIOD", "QUESTION"], "head": "linear", "grid": [3],
        "stream_artifact": "model.stream.int8.onnx"}
    assert meta.uses_stream_cache and not meta.replace(stream_cache=False).uses_stream_cache


@pytest.mark.parametrize(("data", "message"), [
    ({"stream_cache_tokens": 0}, "stream_cache_tokens must be a positive integer, not 0"),
    ({"stream_cache_tokens": True}, "stream_cache_tokens must be a positive integer"),
    ({"stream_cache": "no"}, "stream_cache must be true or false, not 'no'"),
    ({"label_position": "middle"}, "label_position must be 'last' or 'first'"),
    ({"stream_window": {"width": 3}}, "bad stream_window"),
    ({"window": {"left": "x"}}, "bad window"),
    ({"window": [20]}, "bad window"),
    ({"labels": "O"}, "labels must be a list of strings"),
    ({"artifact": 3}, "artifact must be a string"),
    ({"case_margin": -0.5}, "case_margin must be a number >= 0, not -0.5"),
    ({"case_margin": "1"}, "case_margin must be a number >= 0, not '1'"),
    ({"case_margin": True}, "case_margin must be a number >= 0, not True"),
])
def test_malformed_keys_are_one_line_errors_naming_the_file(tmp_path, data, message):
    (tmp_path / METADATA_FILE).write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match=message) as e:
        read_model_meta(tmp_path)
    assert str(tmp_path / METADATA_FILE) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(ArtifactError, match=message):
        write_model_meta(tmp_path / "x", data)  # the writer checks too


def test_missing_and_broken_files(tmp_path):
    with pytest.raises(ArtifactError, match="is not a model folder: no streampunct.json"):
        read_model_meta(tmp_path)
    (tmp_path / METADATA_FILE).write_text("{")
    with pytest.raises(ArtifactError, match="invalid JSON"):
        read_model_meta(tmp_path)
    (tmp_path / METADATA_FILE).write_text("[1]")
    with pytest.raises(ArtifactError, match="must hold a JSON object"):
        read_model_meta(tmp_path)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                     max_leaves=8)
_typed = st.fixed_dictionaries({}, optional={
    "name": st.text(max_size=8), "labels": st.lists(st.text(max_size=3), max_size=4),
    "label_position": st.sampled_from(["last", "first"]), "max_word_tokens": st.integers(1, 64),
    "window": st.dictionaries(st.sampled_from(["size", "left", "right"]), st.integers(0, 200)),
    "stream_window": st.dictionaries(st.sampled_from(["size", "left", "right"]), st.integers(0, 200)),
    "artifact": st.text(max_size=8), "stream_artifact": st.text(max_size=8),
    "stream_cache_tokens": st.integers(1, 500), "stream_cache": st.booleans(),
    "case_margin": st.floats(0, 10) | st.integers(0, 10)})
_record = st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k not in ModelMeta.__dataclass_fields__),
                          _json, max_size=4)


@settings(max_examples=200, deadline=None)
@given(typed=_typed, record=_record)
def test_any_valid_object_round_trips(typed, record):
    data = {**record, **typed}
    meta = ModelMeta.from_dict(data)
    assert meta.to_dict() == data
    assert ModelMeta.from_dict(json.loads(json.dumps(meta.to_dict()))) == meta
    for key, value in data.items():
        assert meta.get(key) == value


def _parses_the_file(path: Path) -> list[str]:
    """Places in ``path`` that name streampunct.json as a plain string (messages inside
    f-strings and docstrings do not count)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(n) for n in ast.walk(node))
    return [f"{path.relative_to(REPO)}:{node.lineno}" for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value == METADATA_FILE and id(node) not in skip]


def test_no_other_module_opens_the_file():
    found = [hit for package in ("streampunct", "engines", "training", "benchmarks")
             for path in sorted((REPO / package).rglob("*.py")) if path.name != "model_meta.py"
             for hit in _parses_the_file(path)]
    assert not found, found
