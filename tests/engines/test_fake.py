"""The one fake engine (tests and ``bench load --engine fake``)."""

import time

import numpy as np
import pytest

from engines.fake import FakeEngine, fake_labels


def test_logits_are_one_hot_labels_of_the_token_ids():
    ids = np.asarray([[1, 11, 14, 26, 13 * 7 * 11, 5]], dtype=np.int64)
    engine = FakeEngine()
    logits = engine.infer(ids, np.ones_like(ids))
    assert logits.shape == (1, 6, 4) and logits.dtype == np.float32
    assert logits.argmax(-1).tolist() == [[0, 1, 2, 3, 3, 0]] == fake_labels(ids).tolist()
    assert engine.batch_sizes == [1]


def test_cost_failures_and_bad_input():
    ids = np.arange(64, dtype=np.int64).reshape(2, 32)
    t0 = time.perf_counter()
    FakeEngine(batch_ms=30, sleep=True).infer(ids, np.ones_like(ids))
    assert time.perf_counter() - t0 >= 0.03
    t0 = time.perf_counter()
    FakeEngine(token_us=500).infer(ids, np.ones_like(ids))  # 64 tokens x 0.5 ms, burnt as CPU work
    assert time.perf_counter() - t0 >= 0.032
    with pytest.raises(RuntimeError, match="injected"):
        FakeEngine(fail_token=40).infer(ids, np.ones_like(ids))
    with pytest.raises(TypeError):
        FakeEngine().infer(ids.astype(np.int32), np.ones_like(ids))
    with pytest.raises(ValueError):
        FakeEngine().infer(ids, np.ones((2, 31), np.int64))
    with pytest.raises(ValueError):
        FakeEngine(batch_ms=-1)


def test_fake_is_a_registered_backend_with_checked_options(tmp_path):
    from engines.base import Engine, EngineError, HeadLogits
    from engines.registry import available_backends, load_engine

    assert "fake" in available_backends()
    engine = load_engine("fake", tmp_path / "no-folder-needed", token_us=1.5, has_case=True)
    assert isinstance(engine, Engine) and isinstance(engine, FakeEngine)
    assert (engine.name, engine.has_case, engine.rows_independent, engine.token_us) == ("fake", True, True, 1.5)
    ids = np.asarray([[5, 17, 22]], dtype=np.int64)
    heads = engine.infer_heads(ids, np.ones_like(ids))
    assert isinstance(heads, HeadLogits) and heads.case.argmax(-1).tolist() == [[1, 2, 0]]
    assert heads.punctuation.argmax(-1).tolist() == fake_labels(ids).tolist()
    assert [t.name for t in engine.io_spec().outputs] == ["logits", "case_logits"]
    with pytest.raises(EngineError, match="unknown option.* speed for the fake backend"):
        load_engine("fake", tmp_path, speed=2)
    with pytest.raises(EngineError, match="option sleep of the fake backend must be true or false"):
        load_engine("fake", tmp_path, sleep="yes")
    with pytest.raises(EngineError, match="costs must be >= 0"):
        load_engine("fake", tmp_path, batch_ms=-1.0)


def test_only_the_fake_backend_serves_a_model_of_its_own(tmp_path):
    from engines.base import EngineError
    from engines.fake import MODEL_META, TOKENIZER_PACKAGE
    from engines.registry import BACKENDS, own_model

    assert [name for name, b in BACKENDS.items() if b.own_model] == ["fake"]
    assert all(own_model(name) is None for name in BACKENDS if name != "fake")
    assert own_model("fake", tmp_path) == (MODEL_META, tmp_path)  # a given folder lends its tokenizer
    meta, folder = own_model("fake")
    assert (meta.name, dict(meta.window)) == ("fake-cost-model", {"size": 126, "left": 40, "right": 20})
    if folder is not None:  # MiniLM's package, when installed (else the caller's default)
        assert TOKENIZER_PACKAGE in str(folder) and (folder / "tokenizer.json").is_file()
    with pytest.raises(EngineError, match="unknown engine backend 'nope'"):
        own_model("nope")
