"""The torch backend: module= or loader=, metadata sources, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engines.base import ArtifactError, EngineError
from engines.registry import load_engine

from .conftest import LABELS, METADATA

torch = pytest.importorskip("torch")


def _expected(module, ids, mask):
    with torch.no_grad():
        return module(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()


def test_module_with_metadata_from_the_folder(tmp_path, tiny_module):
    (tmp_path / "streampunct.json").write_text(json.dumps(METADATA))
    engine = load_engine("torch", tmp_path, module=tiny_module)
    ids, mask = np.array([[2, 10, 11, 3]]), np.ones((1, 4), np.int64)
    np.testing.assert_allclose(engine.infer(ids, mask), _expected(tiny_module, ids, mask), atol=1e-6)
    spec = engine.io_spec()
    assert spec.backend == "torch" and spec.labels == tuple(LABELS)
    assert spec.outputs[0].shape == ("batch", "sequence", 4)
    engine.close()


def test_loader_returning_module_and_metadata(tmp_path, tiny_module):
    calls = []

    def loader(path):
        calls.append(path)
        return tiny_module, {**METADATA, "labels": ["O", "C", "P", "Q"]}

    engine = load_engine("torch", tmp_path, loader=loader)
    assert calls == [tmp_path]
    assert engine.io_spec().labels == ("O", "C", "P", "Q")


def test_needs_module_or_loader(tmp_path):
    with pytest.raises(EngineError, match="needs module= or loader="):
        load_engine("torch", tmp_path)


def test_needs_labels_from_somewhere(tmp_path, tiny_module):
    with pytest.raises(ArtifactError, match="no usable labels/label_position/window"):
        load_engine("torch", tmp_path, module=tiny_module)
