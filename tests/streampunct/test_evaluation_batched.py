"""Batched streaming simulation: the same labels as one engine call per window."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from streampunct.core.windowing import WindowConfig
from streampunct.evaluation.accuracy import streaming_labels, streaming_runs
from tests.streampunct.fakes import FakeAligner, fake_infer

WINDOW = WindowConfig(40, 8, 6)


class CountingInfer:
    """``fake_infer``, counting engine calls and windows (batch rows)."""

    def __init__(self) -> None:
        self.calls = self.rows = 0

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        self.calls += 1
        self.rows += len(input_ids)
        return fake_infer(input_ids, attention_mask)


@pytest.mark.parametrize("batch_size", [1, 7, 64])
@pytest.mark.parametrize("max_delay_ms", [10**12, 900])
def test_batched_runs_equal_one_call_per_window(batch_size, max_delay_ms):
    rng = np.random.default_rng(batch_size)
    aligner = FakeAligner()
    words = [aligner.word(int(rng.integers(1, 4)), k) for k in range(120)]
    rcs = [0, 1, 2, 4, 8, 2]  # a repeated right context is run once
    engine = CountingInfer()
    runs = streaming_runs(words, aligner, WINDOW, engine, rcs, batch_size=batch_size, max_delay_ms=max_delay_ms)
    assert list(runs) == [0, 1, 2, 4, 8]
    for rc, run in runs.items():
        ref = streaming_labels(words, aligner, WINDOW, fake_infer, right_context=rc, max_delay_ms=max_delay_ms)
        assert run == ref  # labels, model calls, tokens and latencies
    requests = sum(run.model_calls for run in runs.values())
    # Each distinct window runs once: windows shared between right contexts (here
    # at the start of the stream, where windows begin at word 0) run once.
    assert engine.rows < requests
    assert engine.calls == -(-engine.rows // batch_size)


def test_no_right_contexts_run_nothing_and_draw_no_bars(capsys):
    aligner = FakeAligner()
    engine = CountingInfer()
    assert streaming_runs([aligner.word(1, k) for k in range(30)], aligner, WINDOW, engine, [],
                          progress=True) == {}
    assert engine.calls == 0
    assert capsys.readouterr().err == ""  # before: three empty progress bars


# -- the tiny runtime model (a real ONNX graph, fp32 and int8) ---------------------

@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A runtime model folder of the tiny 2-layer BERT the engine tests train, plus its int8 artifact."""
    pytest.importorskip("onnxruntime")
    from engines.build.onnx_export import export_onnx
    from engines.build.quantize import quantize_int8_dynamic
    from tests.engines.conftest import METADATA, make_tiny_module, write_tiny_tokenizer

    folder = tmp_path_factory.mktemp("tiny_runtime_model")
    export_onnx(make_tiny_module(), folder / "model.onnx")
    quantize_int8_dynamic(folder / "model.onnx", folder / "model.int8.onnx")
    write_tiny_tokenizer(folder / "tokenizer.json")
    (folder / "streampunct.json").write_text(json.dumps({**METADATA, "encoder": "tiny-bert"}))
    return folder


@pytest.fixture(scope="module")
def tiny_text(tmp_path_factory):
    from streampunct.text.word_labels import read_word_labels
    from tests.engines.conftest import write_word_labels

    return read_word_labels(write_word_labels(tmp_path_factory.mktemp("text") / "words.tsv", n_words=300))


@pytest.mark.parametrize(("artifact", "batch_size"), [("model.onnx", 16), ("model.int8.onnx", 1)])
def test_tiny_model_batched_simulation_gives_the_same_labels(tiny_folder, tiny_text, artifact, batch_size):
    from streampunct.core.decoder import OfflineDecoder

    window = WindowConfig(30, 6, 4)
    p = OfflineDecoder.from_model_dir(tiny_folder, artifact=artifact, intra_op_threads=1)
    try:
        runs = streaming_runs(tiny_text.words, p.aligner, window, p.engine.infer, [0, 1, 3], batch_size=batch_size)
        for rc, run in runs.items():
            ref = streaming_labels(tiny_text.words, p.aligner, window, p.engine.infer, right_context=rc)
            assert run.labels == ref.labels and run.model_calls == ref.model_calls
            assert len(set(run.labels)) > 1  # a real model's labels, not a constant
    finally:
        p.close()


# -- several engine workers ----------------------------------------------------------

class MeetingInfer(CountingInfer):
    """Its first call waits at ``start`` (a barrier of all the workers) until every worker has
    taken a batch, so all of them take part however their threads are scheduled."""

    def __init__(self, start: threading.Barrier) -> None:
        super().__init__()
        self.start = start

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        if self.calls == 0:
            self.start.wait(timeout=30)
        return super().__call__(input_ids, attention_mask)


@pytest.mark.parametrize("batch_size", [1, 5])
def test_workers_give_the_labels_of_one_engine_and_share_the_windows(batch_size):
    rng = np.random.default_rng(7)
    aligner = FakeAligner()
    words = [aligner.word(int(rng.integers(1, 4)), k) for k in range(150)]
    rcs = [0, 1, 4]
    one = CountingInfer()
    ref = streaming_runs(words, aligner, WINDOW, one, rcs, batch_size=batch_size)
    start = threading.Barrier(3)
    workers = [MeetingInfer(start) for _ in range(3)]
    runs = streaming_runs(words, aligner, WINDOW, workers, rcs, batch_size=batch_size)
    assert runs == ref
    # Every batch ran once, on one of the workers, and all of them took part.
    assert sum(w.calls for w in workers) == one.calls
    assert sum(w.rows for w in workers) == one.rows
    assert all(w.calls > 0 for w in workers)


def test_a_failing_worker_fails_the_simulation():
    aligner = FakeAligner()
    words = [aligner.word(1, k) for k in range(60)]

    start = threading.Barrier(2)  # the healthy worker waits until the broken one took a batch too

    def broken(input_ids, attention_mask):
        start.wait(timeout=30)
        raise RuntimeError("engine fell over")

    with pytest.raises(RuntimeError, match="engine fell over"):
        streaming_runs(words, aligner, WINDOW, [MeetingInfer(start), broken], [0, 2])
    with pytest.raises(ValueError, match="non-empty"):
        streaming_runs(words, aligner, WINDOW, [], [0])


def test_tiny_int8_model_two_single_threaded_engines_equal_one(tiny_folder, tiny_text):
    """What ``evaluate`` does by default: one single-threaded ONNX Runtime engine per core."""
    from engines.registry import load_engine
    from streampunct.core.decoder import OfflineDecoder

    window = WindowConfig(30, 6, 4)
    p = OfflineDecoder.from_model_dir(tiny_folder, artifact="model.int8.onnx", intra_op_threads=2)
    extra = [load_engine("onnxruntime", tiny_folder, artifact="model.int8.onnx", intra_op_threads=1)
             for _ in range(2)]
    try:
        ref = streaming_runs(tiny_text.words, p.aligner, window, p.engine.infer, [0, 2])
        runs = streaming_runs(tiny_text.words, p.aligner, window, [e.infer for e in extra], [0, 2])
        assert runs == ref
    finally:
        p.close()
        for e in extra:
            e.close()
