"""Distillation end to end on a tiny model: teacher -> soft labels file -> student; plus the loss."""

import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from training.checkpoint import load_checkpoint  # noqa: E402
from training.data import Document  # noqa: E402
from training.distill import attach_soft_labels, label_sources, read_soft_labels, write_soft_labels  # noqa: E402
from training.losses import distill_loss, kd_terms  # noqa: E402
from training.run import run  # noqa: E402

from .test_train_tiny import tiny_config  # noqa: E402


def test_kd_is_zero_when_student_matches_teacher_and_positive_otherwise():
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0]])
    probs = torch.softmax(logits, -1)
    assert float(kd_terms(logits, probs, 2.0)[0]) == pytest.approx(0.0, abs=1e-5)
    assert float(kd_terms(torch.zeros(1, 4), probs, 2.0)[0]) > 0.01


def test_distill_loss_mixes_kd_and_human_ce():
    logits = torch.randn(3, 4)
    soft = torch.softmax(torch.randn(3, 4), -1)
    soft[2] = float("nan")  # no teacher row for the last token
    labels = torch.tensor([1, 2, 0])
    pseudo = torch.tensor([True, False, False])  # token 0 has no human label
    got = distill_loss(logits, soft, labels, pseudo, temperature=2.0, alpha=0.5)
    kd = kd_terms(logits[:2], soft[:2], 2.0).sum()
    ce = torch.nn.functional.cross_entropy(logits[1:], labels[1:], reduction="sum")
    assert float(got) == pytest.approx(float((kd + 0.5 * ce) / 3), rel=1e-5)


def test_soft_label_file_round_trip_and_attach(tmp_path):
    docs = [Document("ted:1", ["so", "what"], [0, 3], case=[1, 0]), Document("tedx:0", ["um", "yes"], [0, 0], True)]
    probs = [np.array([[0.7, 0.1, 0.1, 0.1, 0.1, 0.8, 0.05, 0.05], [0.1, 0.1, 0.2, 0.6, 0.9, 0.1, 0, 0]]),
             np.array([[0.9, 0.1, 0, 0, 1, 0, 0, 0], [0.1, 0, 0.8, 0.1, 1, 0, 0, 0]])]
    path = write_soft_labels(tmp_path / "s.npz", docs, probs, {"teacher": "t"})
    back, meta = read_soft_labels(path)
    assert meta["teacher"] == "t"
    assert [d.words for d in back] == [["so", "what"], ["um", "yes"]]
    assert back[0].labels == [0, 3] and not back[0].pseudo and back[0].case == [1, 0]
    assert back[1].pseudo and back[1].labels == [0, 2]  # teacher argmax where no human label
    np.testing.assert_allclose(back[0].soft, probs[0], atol=1e-3)  # float16 storage
    human = [Document("ted:1", ["so", "what"], [0, 3], case=[1, 0]), Document("ted:2", ["x"], [0])]
    merged = attach_soft_labels(human, [str(path)])
    assert [d.name for d in merged] == ["ted:1", "ted:2", "tedx:0"]
    assert merged[0].soft is not None and merged[0].labels == [0, 3] and merged[1].soft is None


def test_a_file_from_before_the_fix_reads_its_unlabeled_words_as_unknown(tmp_path):
    """Soft-label files written before 2026-11-26 hold O for caption words; the source lists in
    their meta say which documents had no human labels."""
    docs = [Document("ted:1", ["so", "what"], [0, 3]), Document("tedx:0", ["um", "yes"], [0, 0])]
    probs = [np.array([[0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.2, 0.6]]), np.array([[0.9, 0.1, 0, 0], [0.1, 0, 0.8, 0.1]])]
    old = write_soft_labels(tmp_path / "old.npz", docs, probs, {"labelled": ["ted"], "unlabeled": ["tedx"]})
    back, _ = read_soft_labels(old)
    assert not back[0].pseudo and back[0].labels == [0, 3]
    assert back[1].pseudo and back[1].labels == [0, 2]
    # a source labelled as both keeps its zeros as human labels
    both = write_soft_labels(tmp_path / "both.npz", docs, probs, {"labelled": ["ted", "tedx"], "unlabeled": ["tedx"]})
    assert not read_soft_labels(both)[0][1].pseudo


def test_teacher_soft_labels_train_a_student(tiny_base_model, tiny_data_root, tmp_path):
    teacher = run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "teacher", "optim.max_steps=30",
                              "model.case_head=true", 'data.train=["dev2012", "ted"]'))
    soft = label_sources(teacher.best_dir, ["ted", "dev2012"], ["tedx"], tmp_path / "soft.npz",
                         data_root_dir=str(tiny_data_root), cache_dir=str(tmp_path / "cache"), device="cpu")
    docs, meta = read_soft_labels(soft)
    assert meta["classes"][-4:] == ["lower", "capitalized", "upper", "mixed"]
    assert all(d.soft.shape == (len(d), 8) for d in docs)
    assert {d.name.split(":")[0] for d in docs} == {"ted", "dev2012", "tedx"}
    # caption words have no human label: stored as unknown (-1), read back as the teacher's
    # argmax and marked pseudo, so the student takes no human cross-entropy on them
    with np.load(soft) as z:
        caption_words = sum(len(d) for d in docs if d.name.startswith("tedx:"))
        assert caption_words and int(np.count_nonzero(z["labels"] < 0)) == caption_words
    for d in docs:
        assert d.pseudo == d.name.startswith("tedx:")
        if d.pseudo:
            assert d.labels == d.soft[:, :4].argmax(-1).tolist()
    student = run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "student", "optim.max_steps=30",
                              "model.case_head=true", 'data.train=["dev2012", "ted"]',
                              f'data.soft_labels=["{soft}"]', "data.noise.share=0.5",
                              "data.stream_cut_share=0.3"))
    model, _ = load_checkpoint(student.best_dir)
    assert model.case_head is not None
    assert student.best_f1 > 50  # the tiny task is learnable from the teacher's labels


def test_shards_label_the_same_documents_as_one_run_between_them(tiny_base_model, tiny_data_root, tmp_path):
    teacher = run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "teacher", "optim.max_steps=2",
                              'data.train=["dev2012", "ted"]'))
    common = dict(data_root_dir=str(tiny_data_root), cache_dir=str(tmp_path / "cache"), device="cpu")
    whole, _ = read_soft_labels(label_sources(teacher.best_dir, ["ted", "dev2012"], ["tedx"],
                                              tmp_path / "all.npz", **common))
    parts = []
    for k in range(3):
        docs, meta = read_soft_labels(label_sources(teacher.best_dir, ["ted", "dev2012"], ["tedx"],
                                                    tmp_path / f"shard{k}.npz", shard=(k, 3), **common))
        assert meta["shard"] == f"{k}/3" and docs  # every shard holds documents
        parts.append(docs)
    # each document in exactly one shard, with the labels and probabilities of the whole run
    assert sorted(d.name for p in parts for d in p) == sorted(d.name for d in whole)
    by_name = {d.name: d for d in whole}
    for d in (d for p in parts for d in p):
        assert d.words == by_name[d.name].words and d.labels == by_name[d.name].labels
        np.testing.assert_array_equal(d.soft, by_name[d.name].soft)


def test_a_shard_folder_resumes_skips_finished_shards_and_refuses_a_foreign_one(
        tiny_base_model, tiny_data_root, tmp_path, monkeypatch):
    from training import distill

    teacher = run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "teacher", "optim.max_steps=2",
                              'data.train=["dev2012", "ted"]'))
    common = dict(data_root_dir=str(tiny_data_root), cache_dir=str(tmp_path / "cache"), device="cpu")
    whole, _ = read_soft_labels(label_sources(teacher.best_dir, ["ted", "dev2012"], ["tedx"],
                                              tmp_path / "all.npz", **common))
    out = tmp_path / "shards"
    labelled = []
    real_label = distill._label

    def counting_label(decode, meta, docs, path, **kw):
        labelled.append(kw["shard"])
        if len(labelled) == 2:  # a stop in the middle of the second shard
            raise KeyboardInterrupt
        return real_label(decode, meta, docs, path, **kw)

    monkeypatch.setattr(distill, "_label", counting_label)
    with pytest.raises(KeyboardInterrupt):
        distill.label_shard_dir(teacher.best_dir, ["ted", "dev2012"], ["tedx"], out, 3, **common)
    assert sorted(p.name for p in out.iterdir()) == ["shard_000_of_003.npz"]  # nothing half-written
    labelled.clear()
    monkeypatch.setattr(distill, "_label", real_label)
    paths = distill.label_shard_dir(teacher.best_dir, ["ted", "dev2012"], ["tedx"], out, 3, **common)
    parts = [read_soft_labels(p)[0] for p in paths]
    assert sorted(d.name for p in parts for d in p) == sorted(d.name for d in whole)
    by_name = {d.name: d for d in whole}
    for d in (d for p in parts for d in p):
        np.testing.assert_array_equal(d.soft, by_name[d.name].soft)
    # run again: every shard is checked and skipped (the teacher is not even opened)
    monkeypatch.setattr(distill, "teacher_decoder", lambda *a, **k: pytest.fail("relabelled a finished shard"))
    assert distill.label_shard_dir(teacher.best_dir, ["ted", "dev2012"], ["tedx"], out, 3, **common) == paths
    # a shard of another selection in the folder is refused with its name
    with pytest.raises(distill.InputError, match="shard_000_of_003.npz does not hold shard 0/3"):
        distill.label_shard_dir(teacher.best_dir, ["ted"], ["tedx"], out, 3, **common)
    # so is one of another teacher (other weights), before anything is labelled
    other = tmp_path / "other_teacher"
    shutil.copytree(teacher.best_dir, other)
    with open(other / "head.safetensors", "ab") as f:
        f.write(b" ")
    with pytest.raises(distill.InputError, match="shard_000_of_003.npz was labelled by another teacher"):
        distill.label_shard_dir(other, ["ted", "dev2012"], ["tedx"], out, 3, **common)


def test_processes_share_a_shard_folder_through_locks(tiny_base_model, tiny_data_root, tmp_path, monkeypatch):
    """A shard another live process holds is left to it (this one waits for its file); a lock
    whose process is gone is taken over; no lock is left behind."""
    import os
    import socket
    import subprocess

    from training import distill

    teacher = run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "teacher", "optim.max_steps=2",
                              'data.train=["dev2012", "ted"]'))
    common = dict(data_root_dir=str(tiny_data_root), cache_dir=str(tmp_path / "cache"), device="cpu")
    alone = tmp_path / "alone"
    reference = distill.label_shard_dir(teacher.best_dir, ["ted", "dev2012"], ["tedx"], alone, 3, **common)
    out = tmp_path / "shared"
    out.mkdir()
    other = subprocess.Popen(["sleep", "60"])  # a live process "labelling" shard 1
    dead = subprocess.Popen(["true"])
    dead.wait()  # a stopped run's lock on shard 2
    host = socket.gethostname()
    (out / "shard_001_of_003.npz.lock").write_text(f"{host} {other.pid}")
    (out / "shard_002_of_003.npz.lock").write_text(f"{host} {dead.pid}")
    labelled, waits = [], []
    real_label = distill._label

    def recording_label(decode, meta, docs, path, **kw):
        labelled.append(kw["shard"][0])
        return real_label(decode, meta, docs, path, **kw)

    def other_finishes(seconds):  # the other process writes its shard and lets go
        waits.append(seconds)
        os.replace(reference[1], out / "shard_001_of_003.npz")
        (out / "shard_001_of_003.npz.lock").unlink()

    monkeypatch.setattr(distill, "_label", recording_label)
    monkeypatch.setattr(distill.time, "sleep", other_finishes)
    try:
        paths = distill.label_shard_dir(teacher.best_dir, ["ted", "dev2012"], ["tedx"], out, 3, poll_s=7.0,
                                        **common)
    finally:
        other.kill()
        other.wait()
    assert labelled == [0, 2] and waits == [7.0]
    assert sorted(p.name for p in out.iterdir()) == [f"shard_00{k}_of_003.npz" for k in range(3)]
    for mine, ref in zip(paths, reference, strict=True):
        if ref.is_file():
            np.testing.assert_array_equal(np.load(mine)["probs"], np.load(ref)["probs"])


@pytest.mark.parametrize("bad", ["3/3", "-1/2", "1", "a/b", "0/0"])
def test_a_bad_shard_is_refused_with_its_value(bad, tmp_path, capsys):
    from training.distill import main

    rc = main(["label", "--teacher", str(tmp_path / "none"), "--out", str(tmp_path / "x.npz"), f"--shard={bad}",
               "--unlabeled", "tedx"])
    assert rc != 0
    assert bad in capsys.readouterr().err
    assert not (tmp_path / "x.npz").exists()


def test_a_runtime_folder_teacher_writes_punctuation_and_case(tiny_base_model, tiny_data_root, tmp_path):
    """An ONNX model folder with a truecasing head (like models/default) labels both heads,
    and its probabilities match the torch checkpoint it was built from."""
    pytest.importorskip("onnxruntime")
    from streampunct.cli import main as cli

    teacher = run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "teacher", "optim.max_steps=20",
                              "model.case_head=true", 'data.train=["dev2012", "ted"]'))
    folder = tmp_path / "runtime"
    assert cli(["build-engine", "--model", str(teacher.best_dir), "--backend", "onnxruntime",
                "--precision", "fp32", "--out", str(folder)]) == 0
    common = dict(data_root_dir=str(tiny_data_root), cache_dir=str(tmp_path / "cache"), device="cpu")
    onnx_docs, meta = read_soft_labels(label_sources(folder, ["dev2012"], [], tmp_path / "onnx.npz", **common))
    torch_docs, _ = read_soft_labels(label_sources(teacher.best_dir, ["dev2012"], [], tmp_path / "pt.npz", **common))
    assert meta["kind"] == "runtime" and meta["classes"][-4:] == ["lower", "capitalized", "upper", "mixed"]
    assert [d.name for d in onnx_docs] == [d.name for d in torch_docs]
    for o, t in zip(onnx_docs, torch_docs, strict=True):
        assert o.soft.shape == t.soft.shape == (len(o), 8)
        np.testing.assert_allclose(o.soft, t.soft, atol=2e-2)  # fp32 graph vs torch, float16 storage


def test_labelled_text_nobody_punctuated_is_left_out_and_read_as_teacher_only(tmp_path):
    from training.data import drop_unpunctuated, lacks_human_marks

    words = [f"w{i}" for i in range(60)]
    captions = Document("ted:captions", words, [0] * 59 + [2])  # 1 mark in 60 words: 1.7 per 100
    talk = Document("ted:talk", words, ([0] * 9 + [1]) * 6)  # 10 marks per 100 words
    short = Document("ted:short", words[:10], [0] * 10)  # too short to judge
    assert lacks_human_marks(captions.labels, 2.0) and not lacks_human_marks(talk.labels, 2.0)
    assert not lacks_human_marks(captions.labels, 0.0) and not lacks_human_marks(short.labels, 2.0)
    assert [d.name for d in drop_unpunctuated([captions, talk, short], 2.0)] == ["ted:talk", "ted:short"]
    probs = [np.tile([0.2, 0.1, 0.6, 0.1], (60, 1)), np.tile([0.7, 0.1, 0.1, 0.1], (60, 1))]
    path = write_soft_labels(tmp_path / "s.npz", [captions, talk], probs, {"labelled": ["ted"], "unlabeled": []})
    plain, _ = read_soft_labels(path)
    assert not plain[0].pseudo  # without the rule the stored O labels count as human
    ruled, _ = read_soft_labels(path, min_marks_per_100_words=2.0)
    assert ruled[0].pseudo and ruled[0].labels == [2] * 60  # the teacher's argmax, no human CE
    assert not ruled[1].pseudo and ruled[1].labels == talk.labels
    merged = attach_soft_labels([talk], [str(path)], min_marks_per_100_words=2.0)
    assert [(d.name, d.pseudo) for d in merged] == [("ted:talk", False), ("ted:captions", True)]


def test_a_half_made_lock_is_left_while_fresh_and_taken_over_when_old(tmp_path):
    """A process stopped between creating its lock and writing its pid leaves an empty file:
    it would hold the shard for ever, so once it is older than UNREADABLE_LOCK_S it is taken."""
    import os
    import time

    from training.distill import _claim
    from training.lockfile import UNREADABLE_LOCK_S

    lock = tmp_path / "shard_000_of_002.npz.lock"
    lock.write_text("")
    assert not _claim(lock) and lock.read_text() == ""
    old = time.time() - UNREADABLE_LOCK_S - 1
    os.utime(lock, (old, old))
    assert _claim(lock)
    assert lock.read_text().split()[1].partition("@")[0] == str(os.getpid())


def test_label_refuses_nothing_to_label_and_a_shard_count_below_one(tmp_path, capsys):
    from training.distill import main

    base = ["label", "--teacher", str(tmp_path / "none"), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit):
        main(base)
    assert "nothing to label: give --labelled and/or --unlabeled sources" in capsys.readouterr().err
    for shards in ("0", "-2"):
        with pytest.raises(SystemExit):
            main([*base, "--unlabeled", "tedx", "--shards", shards])
        assert f"--shards must be >= 1, got {shards}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_device_options_a_teacher_cannot_use_are_refused(tmp_path):
    from training.distill import InputError, teacher_decoder

    shipped = Path(__file__).resolve().parents[2] / "models" / "default"
    if (shipped / "streampunct.json").is_file():
        with pytest.raises(InputError, match="is a runtime folder .*--device cuda and --bf16 apply to a training"):
            teacher_decoder(shipped, device="cuda")
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="--device cuda: torch sees no CUDA device"):
            teacher_decoder(tmp_path, device="cuda")
