"""benchmarks.mark_rate: punctuation density on held-out ASR captions, without labels."""

from __future__ import annotations

import numpy as np
import pytest

import benchmarks.mark_rate as mr
from streampunct.labels import LABELS


def test_rates_count_marks_per_100_words():
    idx = {name: i for i, name in enumerate(LABELS)}
    labels = np.array([idx["O"]] * 16 + [idx["COMMA"]] * 2 + [idx["PERIOD"]] + [idx["QUESTION"]])
    r = mr.rates(labels)
    assert r["words"] == 20
    assert r["per_class"] == {"COMMA": 10.0, "PERIOD": 5.0, "QUESTION": 5.0}
    assert r["marks_per_100_words"] == 20.0


def test_rates_of_nothing_is_zero():
    assert mr.rates(np.array([], dtype=np.int64))["marks_per_100_words"] == 0.0


def test_held_out_captions_leave_out_the_training_draw(tiny_data_root, monkeypatch):
    from training.data import load_unlabeled

    monkeypatch.setattr(mr, "TRAINING_DRAW", {"max_words": 150, "seed": 15})
    drawn = {d.name for d in load_unlabeled(["tedx"], tiny_data_root, max_words=150, seed=15)}
    held = mr.held_out_captions(tiny_data_root, words=10_000)
    assert len(drawn) == 1 and len(held) == 1
    assert not drawn & {d.name for d in held}
    assert len(held[0]) == 150


def test_held_out_sample_stops_at_the_word_budget(tiny_data_root, monkeypatch):
    monkeypatch.setattr(mr, "TRAINING_DRAW", {"max_words": 1, "seed": 15})  # draws (part of) one talk
    assert mr.held_out_captions(tiny_data_root, words=0) == []
    assert sum(map(len, mr.held_out_captions(tiny_data_root, words=1))) == 150


def test_a_draw_that_would_take_every_talk_is_fitted_to_the_folder(tiny_data_root):
    """A folder with fewer caption words than the students' 400k-word draw (a tiny one, from the
    command line): the draw shrinks to what the folder holds so that talks are held out, the same
    for mark_rate, label's exclusion and the trainer; a folder of one talk holds none out."""
    import gzip

    import training.data as data

    draw = data.CAPTION_TRAINING_DRAW
    assert data.fitted_caption_draw(tiny_data_root, draw) == {"max_words": 150, "seed": 15}  # half of 2 x 150
    held = data.held_out_captions(tiny_data_root)
    assert [(d.name, len(d)) for d in held] == [("tedx:0", 150)]
    assert [d.name for d in mr.held_out_captions(tiny_data_root, words=10_000)] == ["tedx:0"]
    drawn = {d.name for d in data.load_unlabeled(["tedx"], tiny_data_root, max_words=150, seed=15)}
    assert drawn == {"tedx:1"}

    # uneven talks: half the words would reach into the last talk of the draw's order (tedx:0,
    # 200 words, as above); the draw stops before it
    captions = tiny_data_root / "unlabeled" / "tedx_autocaptions.txt.gz"
    with gzip.open(captions, "wt", encoding="utf-8") as f:
        f.write(" ".join(["the"] * 200) + "\n" + " ".join(["cat"] * 100) + "\n")
    assert data.fitted_caption_draw(tiny_data_root, draw) == {"max_words": 100, "seed": 15}
    assert [(d.name, len(d)) for d in data.held_out_captions(tiny_data_root)] == [("tedx:0", 200)]
    # a draw that leaves talks out is not touched
    assert [d.name for d in data.held_out_captions(tiny_data_root, training_draw={"max_words": 200, "seed": 0})] \
        == ["tedx:1"]

    with gzip.open(captions, "wt", encoding="utf-8") as f:
        f.write("the cat sat on the mat\n")
    assert data.fitted_caption_draw(tiny_data_root, draw) == draw
    assert data.held_out_captions(tiny_data_root) == [] == mr.held_out_captions(tiny_data_root, words=10_000)


def test_a_caption_draw_can_leave_out_the_held_out_talks(tiny_data_root, monkeypatch):
    """training.distill label --exclude-held-out-captions: a caption draw of the whole pool holds
    the training draw's talk and not the held-out one, so mark_rate's check stays clean."""
    import training.data as data
    import training.distill as distill

    monkeypatch.setattr(data, "CAPTION_TRAINING_DRAW", {"max_words": 150, "seed": 15})
    held = {d.name for d in data.held_out_captions(tiny_data_root, words=10_000)}
    drawn = {d.name for d in data.load_unlabeled(["tedx"], tiny_data_root, max_words=150, seed=15)}
    assert len(held) == 1 and not held & drawn
    everything = {d.name for d in data.load_unlabeled(["tedx"], tiny_data_root, max_words=0, seed=15)}
    kept = {d.name for d in data.load_unlabeled(["tedx"], tiny_data_root, max_words=0, seed=15, exclude=held)}
    assert kept == everything - held == drawn

    monkeypatch.setattr(distill, "teacher_decoder", lambda teacher, device="auto", bf16=False, threads=0: (
        lambda docs, bs=64: [np.zeros((len(d.words), len(LABELS)), dtype=np.float32) for d in docs],
        {"teacher": "fake"}))
    names = {}
    for flag in (False, True):
        out = distill.label_sources("fake", [], ["tedx"], tiny_data_root / f"soft_{flag}.npz",
                                    data_root_dir=str(tiny_data_root), seed=15,
                                    exclude_held_out_captions=flag)
        names[flag] = {d.name for d in distill.read_soft_labels(out)[0]}
    assert names[False] == everything
    assert names[True] == everything - held


def test_a_checkpoint_is_decoded_by_its_punctuation_head_alone(monkeypatch, tmp_path):
    """A training checkpoint (the teacher before export) is read like a runtime folder; the case
    head's logits that follow the punctuation head's never decide a mark."""
    import training.distill as distill
    from training.data import Document

    asked = []

    def decoder(teacher, device="auto", bf16=False):
        asked.append((teacher, device))

        def decode(docs, bs=64):
            out = []
            for d in docs:
                lg = np.zeros((len(d.words), len(LABELS) + 3), dtype=np.float32)
                lg[:, 2] = 1.0  # PERIOD everywhere from the punctuation head...
                lg[:, len(LABELS):] = 5.0  # ...and larger case logits, which must be ignored
                out.append(lg)
            return out
        return decode, {"teacher": str(teacher)}

    monkeypatch.setattr(distill, "teacher_decoder", decoder)
    docs = [Document("a", ["so", "we", "went"], [0, 0, 0])]
    caps, dev = mr.model_labels(tmp_path / "best", docs, docs[:1])
    assert asked == [(tmp_path / "best", "cpu")]
    assert caps.tolist() == dev.tolist() == [2, 2, 2]


def test_a_data_folder_with_no_held_out_caption_talk_is_named(tiny_data_root, tmp_path, capsys):
    """A folder of one caption talk: it falls in the training draw, however fitted: nothing to measure."""
    import gzip

    with gzip.open(tiny_data_root / "unlabeled" / "tedx_autocaptions.txt.gz", "wt", encoding="utf-8") as f:
        f.write("the cat sat on the mat\n")
    with pytest.raises(SystemExit) as done:
        mr.main([str(tmp_path / "model"), "--data-root", str(tiny_data_root)])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert f"no TEDx caption talk in {tiny_data_root} is held out" in err
    assert "fewer than two caption talks" in err


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
