"""``bench accuracy`` scores the streams the server serves by default: with a streaming graph,
cached left context, simulated as ``streampunct evaluate --right-context`` simulates it; with
``stream_cache="off"``, whole windows. On a tiny two-head model with both graphs."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("transformers")

from benchmarks.accuracy_bench import AccuracyBenchConfig, run_accuracy_bench  # noqa: E402
from tests.engines.conftest import (  # noqa: E402
    LABELS,
    tiny_bert_config,
    tiny_two_head_model,
    write_tiny_tokenizer,
    write_word_labels,
)

RIGHT_CONTEXTS = (0, 2)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A model folder with a whole-window graph (model.onnx) and a streaming graph whose
    cache keeps 4 tokens, far fewer than the windows' left context: the two disagree."""
    from engines.build.onnx_export import export_onnx
    from engines.build.stream_graph import build_stream_artifact

    torch.set_num_threads(1)
    model = tiny_two_head_model(tmp_path_factory.mktemp("bert"), tiny_bert_config())
    with torch.no_grad():  # sharper attention than a fresh init's near-uniform one: context matters
        for layer in model.encoder.encoder.layer:
            layer.attention.self.query.weight.mul_(20.0)
            layer.attention.self.key.weight.mul_(20.0)
    path = tmp_path_factory.mktemp("model") / "tiny"
    path.mkdir()
    write_tiny_tokenizer(path / "tokenizer.json")
    (path / "streampunct.json").write_text(
        json.dumps(
            {
                "labels": LABELS,
                "label_position": "last",
                "window": {"size": 40, "left": 16, "right": 6},
                "stream_cache_tokens": 4,
            }
        )
    )
    export_onnx(model, path / "model.onnx")
    build_stream_artifact(model, path, source_sha256="abc", quantize_embeddings=False)
    return path


@pytest.fixture(scope="module")
def words(tmp_path_factory):
    return write_word_labels(tmp_path_factory.mktemp("data") / "words.tsv", n_words=240)


class Scored:
    """Records the predictions every scorer call gets, in order."""

    def __init__(self, monkeypatch) -> None:
        import streampunct.evaluation.accuracy as accuracy
        import streampunct.evaluation.scores as scores

        self.preds: list[list[int]] = []
        real = scores.evaluate

        def record(gold, pred):
            self.preds.append([int(x) for x in pred])
            return real(gold, pred)

        monkeypatch.setattr(scores, "evaluate", record)  # the bench's scorer
        monkeypatch.setattr(accuracy, "score", record)  # evaluate's


def bench(folder, words, out, stream_cache: str, delays=()) -> dict:
    """The bench with ``stream_cache`` (auto: the default, not given)."""
    given = {} if stream_cache == "auto" else {"stream_cache": stream_cache}
    return run_accuracy_bench(
        AccuracyBenchConfig(
            model_dir=folder,
            data=words,
            right_contexts=RIGHT_CONTEXTS,
            delays_ms=delays,
            out_dir=out,
            name=f"acc_{stream_cache}",
            **given,
        )
    )


def test_the_streams_are_evaluates_cached_left_context_and_off_gives_whole_windows(
    folder, words, tmp_path, monkeypatch, capsys
):
    from streampunct.cli import main
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.evaluation.accuracy import streaming_labels
    from streampunct.text.word_labels import read_word_labels

    scored = Scored(monkeypatch)
    assert (
        main(
            [
                "evaluate",
                "--model",
                str(folder),
                "--data",
                str(words),
                "--workers",
                "1",
                "--right-context",
                *map(str, RIGHT_CONTEXTS),
            ]
        )
        == 0
    )
    evaluated = scored.preds[1:]  # offline first, then one per right context
    assert len(evaluated) == len(RIGHT_CONTEXTS)

    scored.preds.clear()
    payload = bench(folder, words, tmp_path, "auto")
    cached = scored.preds[1:]
    assert cached == evaluated  # the same labels, word for word, at every right context
    assert "streams: cached left context (--stream-cache auto)" in capsys.readouterr().out
    assert payload["stream_cache"] is True

    scored.preds.clear()
    payload = bench(folder, words, tmp_path, "off", delays=(800,))
    assert "streams: whole windows (--stream-cache off)" in capsys.readouterr().out
    assert payload["stream_cache"] is False
    assert [(p["mode"], p["setting"]) for p in payload["points"]] == [
        ("offline", None),
        ("right_context", 0),
        ("right_context", 2),
        ("max_delay_ms", 800),
    ]
    whole = scored.preds[1:3]
    data = read_word_labels(words)
    punct = OfflineDecoder.from_model_dir(folder)
    try:  # whole windows, one engine call each: what the bench ran before the cache
        expected = [
            streaming_labels(
                data.words, punct.aligner, punct.stream_window, punct.engine.infer, right_context=rc
            ).labels
            for rc in RIGHT_CONTEXTS
        ]
    finally:
        punct.close()
    assert whole == expected
    assert whole != cached  # the two paths differ on this model: the comparisons above can fail


def test_the_delay_sweep_runs_on_the_cache_too(folder, words, tmp_path):
    payload = bench(folder, words, tmp_path, "auto", delays=(400, 3200))
    delays = [p for p in payload["points"] if p["mode"] == "max_delay_ms"]
    assert [p["setting"] for p in delays] == [400, 3200]
    # a word waits at most its delay bound (words come every 0.4 s; the file's end is a flush)
    assert delays[0]["latency_s_p95"] <= 0.4 + 1e-6
    assert delays[1]["latency_s_mean"] > delays[0]["latency_s_mean"]
    assert json.loads((tmp_path / "acc_auto.json").read_text())["stream_cache"] is True
