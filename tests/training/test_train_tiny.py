"""End-to-end runs of a tiny randomly initialised model on a few hundred synthetic words."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from streampunct.core.alignment import Aligner  # noqa: E402
from training.checkpoint import checkpoint_aligner, load_checkpoint, save_checkpoint  # noqa: E402
from training.config import load_config  # noqa: E402
from training.data import Document, data_root, load_unlabeled  # noqa: E402
from training.pipeline import prepare, supervised_trainer  # noqa: E402
from training.run import run  # noqa: E402
from training.self_training import pseudo_label  # noqa: E402

from .conftest import synthetic_words  # noqa: E402


def tiny_config(base, root, out, *extra):
    return load_config(None, [
        f'model.base_model="{base}"', "model.random_init=true", "model.dropout=0.0",
        f'data.root="{root}"', f'data.cache_dir="{Path(out).parent / "cache"}"', "data.max_len=32", "data.max_word_tokens=8",
        "optim.batch_size=4", "optim.lr=3e-3", "optim.warmup_ratio=0.0", "optim.log_every=1",
        "optim.epochs=8", "optim.patience=0", "optim.checkpoint_every=0", "optim.seed=1",
        "eval.window_size=30", "eval.window_left=6", "eval.window_right=4", "eval.batch_size=8",
        f'out="{out}"', *extra])


def train_losses(out):
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["type"] == "train"]


def test_tiny_model_training_loss_falls(tiny_base_model, tiny_data_root, tmp_path):
    out = tmp_path / "run"
    cfg = tiny_config(tiny_base_model, tiny_data_root, out, "optim.max_steps=40")
    result = run(cfg)
    losses = train_losses(out)
    assert len(losses) == 40
    assert np.mean(losses[-8:]) < 0.6 * np.mean(losses[:8])
    # the best checkpoint reloads and carries the metadata contract
    model, meta = load_checkpoint(result.best_dir)
    for key in ("labels", "label_position", "max_word_tokens", "window", "head", "base_model",
                "training_config", "data_hashes", "validation", "created"):
        assert key in meta
    assert meta["window"] == {"size": 30, "left": 6, "right": 4}
    assert set(meta["data_hashes"]) == {"dev2012", "dev2010"}
    assert meta["validation"]["overall_f1"] == pytest.approx(result.best_f1, abs=0.01)
    assert result.best_f1 > 50  # the marks are predictable from the words


def test_validation_counts_the_marks_on_held_out_captions(tiny_base_model, tiny_data_root, tmp_path,
                                                          monkeypatch):
    """eval.caption_marks_words: each validation record carries the marks per 100 words the model
    puts on held-out TEDx captions (no labels there), counted on the sample mark_rate reads."""
    import training.data
    from training.data import held_out_captions

    monkeypatch.setattr(training.data, "CAPTION_TRAINING_DRAW", {"max_words": 150, "seed": 15})  # one talk

    out = tmp_path / "run"
    cfg = tiny_config(tiny_base_model, tiny_data_root, out, "optim.max_steps=6", "optim.eval_every=3",
                      "eval.caption_marks_words=100")
    setup = prepare(cfg)
    assert [d.name for d in setup.caption_docs] == [d.name for d in held_out_captions(tiny_data_root, 100)]
    assert setup.caption_docs
    run(cfg)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in rows if r["type"] == "valid"]
    assert len(valid) >= 2
    assert all(0.0 <= r["caption_marks_per_100_words"] <= 100.0 for r in valid)
    for r in valid:  # the classes add up to the overall density (each rounded to 0.01)
        per_class = r["caption_marks_per_class"]
        assert list(per_class) == ["COMMA", "PERIOD", "QUESTION"]
        assert all(v >= 0.0 for v in per_class.values())
        assert abs(sum(per_class.values()) - r["caption_marks_per_100_words"]) <= 0.03
    # off by default: no such field
    out2 = tmp_path / "run2"
    run(tiny_config(tiny_base_model, tiny_data_root, out2, "optim.max_steps=3", "optim.eval_every=3"))
    rows = [json.loads(line) for line in (out2 / "metrics.jsonl").read_text().splitlines()]
    assert not any("caption_marks_per_100_words" in r or "caption_marks_per_class" in r for r in rows)


def test_resume_continues_from_saved_state(tiny_base_model, tiny_data_root, tmp_path):
    out = tmp_path / "run"
    run(tiny_config(tiny_base_model, tiny_data_root, out, "optim.max_steps=6", "optim.epochs=2"))
    state = torch.load(out / "state.pt", weights_only=False)
    assert state["state"]["step"] == 6
    run(tiny_config(tiny_base_model, tiny_data_root, out, "optim.max_steps=10", "optim.epochs=2"),
        resume=True)
    state = torch.load(out / "state.pt", weights_only=False)
    assert state["state"]["step"] == 10


@pytest.mark.parametrize("head", ["linear", "blstm_crf"])
def test_checkpoint_round_trip(tiny_base_model, tmp_path, head):
    from training.model import build_model

    torch.manual_seed(0)
    model = build_model(tiny_base_model, head=head, random_init=True, dropout=0.0).eval()
    al = Aligner.from_file(tiny_base_model)
    meta = {"label_position": "last", "max_word_tokens": 16,
            "window": {"size": 126, "left": 40, "right": 20}}
    save_checkpoint(tmp_path / "ck", model, tiny_base_model, meta)
    loaded, got = load_checkpoint(tmp_path / "ck")
    ids = torch.tensor([[al.cls_id, 2054, 2003, 2023, al.sep_id, al.pad_id]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids, mask), model(ids, mask))
    assert loaded(ids, mask).shape == (1, 6, 4)
    assert got["head"] == head and (tmp_path / "ck" / "tokenizer.json").is_file()
    assert checkpoint_aligner(tmp_path / "ck").label_position == "last"


def test_pseudo_labeling_and_one_student_step(tiny_base_model, tiny_data_root, tmp_path):
    cfg = tiny_config(tiny_base_model, tiny_data_root, tmp_path / "teacher", "optim.max_steps=20")
    teacher = run(cfg)
    t_model, t_meta = load_checkpoint(teacher.best_dir)
    from streampunct.core.windowing import WindowConfig

    unlabeled = load_unlabeled(["tedx"], data_root(str(tiny_data_root)), max_words=10_000, seed=0)
    assert unlabeled and all(d.pseudo for d in unlabeled)  # placeholder labels, never human ones
    pseudo = pseudo_label(t_model, checkpoint_aligner(teacher.best_dir), unlabeled,
                          WindowConfig(**t_meta["window"]), batch_size=8)
    assert [len(d) for d in pseudo] == [len(d) for d in unlabeled]
    assert all(d.pseudo for d in pseudo)
    # the teacher learned the word -> mark rule, so its labels follow it
    words = [w for d in pseudo for w in d.words]
    labels = [x for d in pseudo for x in d.labels]
    assert np.mean([lab == 1 for w, lab in zip(words, labels, strict=True) if w == "however"]) > 0.5

    st_cfg = tiny_config(tiny_base_model, tiny_data_root, tmp_path / "student", "optim.max_steps=1",
                         'method.kind="self_training"', "method.self_training.alpha=0.5",
                         "method.self_training.beta2=0.1")
    setup = prepare(st_cfg)
    trainer = supervised_trainer(setup, tmp_path / "student", docs=[*setup.train_docs, *pseudo])
    flags = np.concatenate([batch.pseudo for batch in trainer.stream(0)])
    assert flags.any() and not flags.all()  # an epoch mixes human and pseudo sequences
    result = trainer.fit()
    assert result.steps == 1 and (result.best_dir / "streampunct.json").is_file()


def test_self_training_command_end_to_end(tiny_base_model, tiny_data_root, tmp_path):
    cfg = tiny_config(tiny_base_model, tiny_data_root, tmp_path / "st", "optim.max_steps=15",
                      'method.kind="self_training"', "method.self_training.max_iterations=1")
    result = run(cfg)
    record = json.loads((tmp_path / "st" / "self_training.json").read_text())
    assert len(record["rounds"]) == 1 and result.best_dir.is_dir()
    assert record["teacher"]["dir"].endswith("teacher/best")
    # a given teacher checkpoint (e.g. a larger encoder) skips teacher training
    cfg2 = tiny_config(tiny_base_model, tiny_data_root, tmp_path / "st2", "optim.max_steps=3",
                       'method.kind="self_training"', "method.self_training.max_iterations=1",
                       f'method.self_training.teacher="{record["teacher"]["dir"]}"')
    run(cfg2)
    record2 = json.loads((tmp_path / "st2" / "self_training.json").read_text())
    assert record2["teacher"]["dir"] == record["teacher"]["dir"]
    assert not (tmp_path / "st2" / "teacher").exists()
    assert (tmp_path / "st2" / "best" / "streampunct.json").is_file()


def test_adversarial_end_to_end(tiny_base_model, tiny_data_root, tmp_path):
    pytest.importorskip("spacy")
    cfg = tiny_config(tiny_base_model, tiny_data_root, tmp_path / "adv", "optim.max_steps=12",
                      'model.head="blstm_crf"', 'method.kind="adversarial"', "data.max_pos_words=300")
    result = run(cfg)
    rows = [json.loads(line) for line in (tmp_path / "adv" / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if r["type"] == "train"]
    assert any("pos_loss" in r for r in train_rows) and any("pun_loss" in r for r in train_rows)
    assert any("adv" in r for r in train_rows)
    assert "viterbi" in result.validation
    model, meta = load_checkpoint(result.best_dir)
    assert meta["head"] == "blstm_crf" and "pos_tagset" in meta["auxiliary"]


def test_learning_rate_warms_up_then_decays_to_zero(tiny_base_model, tiny_data_root, tmp_path):
    result = run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "s", "optim.max_steps=20",
                             "optim.warmup_ratio=0.25", "optim.lr=1e-3", "optim.log_every=1"))
    rows = [json.loads(x) for x in (result.best_dir.parent / "metrics.jsonl").read_text().splitlines()]
    lr = {r["step"]: r["lr"] for r in rows if r["type"] == "train"}
    # transformers' linear schedule: 5 warmup steps up to the peak, then down to 0 at step 20
    assert lr[1] == pytest.approx(1e-3 / 5) and lr[5] == pytest.approx(1e-3)
    assert lr[10] == pytest.approx(1e-3 * 10 / 15) and lr[20] == pytest.approx(0.0)


def test_stop_step_ends_a_run_early_on_the_full_runs_schedule(tiny_base_model, tiny_data_root, tmp_path):
    """optim.stop_step: the first steps of a longer run, exactly (release 3's teacher is the
    step-150 validation of a 6,000-step schedule); max_steps would shorten the schedule instead."""
    extra = ("optim.max_steps=20", "optim.warmup_ratio=0.25", "optim.lr=1e-3", "optim.eval_every=4")
    full = run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "full", *extra))
    cut = run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "cut", *extra, "optim.stop_step=8"))

    def rows(result, kind):
        lines = (result.best_dir.parent / "metrics.jsonl").read_text().splitlines()
        return [json.loads(x) for x in lines if json.loads(x)["type"] == kind]

    lr_full = {r["step"]: r["lr"] for r in rows(full, "train")}
    lr_cut = {r["step"]: r["lr"] for r in rows(cut, "train")}
    assert max(lr_cut) == 8 and max(lr_full) == 20
    assert lr_cut == {k: lr_full[k] for k in lr_cut}  # the same schedule: 1e-3 * 12 / 15 at step 8
    assert lr_cut[8] == pytest.approx(1e-3 * 12 / 15)
    assert [(r["step"], r["overall"]["f1"]) for r in rows(cut, "valid")] == \
        [(r["step"], r["overall"]["f1"]) for r in rows(full, "valid") if r["step"] <= 8]
    assert torch.load(tmp_path / "cut" / "state.pt", weights_only=False)["state"]["step"] == 8
    with pytest.raises(Exception, match="stop_step"):
        tiny_config(tiny_base_model, tiny_data_root, tmp_path / "bad", "optim.stop_step=-1")


def test_documents_are_fed_as_given():
    w, labels = synthetic_words(10)
    assert len(Document("x", w, labels)) == 10


def test_param_groups_give_heads_their_own_rate(tiny_base_model):
    from training.model import build_model
    from training.trainer import param_groups

    model = build_model(tiny_base_model, head="blstm_crf", random_init=True)
    groups = param_groups([model], 0.01, lr=1e-4, head_lr=1e-3, encoder=model.encoder)
    by_id = {id(p): g for g in groups for p in g["params"]}
    assert by_id[id(model.head.crf.transitions)]["lr"] == 1e-3
    assert by_id[id(model.head.out.bias)]["weight_decay"] == 0.0
    enc = model.encoder.embeddings.word_embeddings.weight
    assert by_id[id(enc)]["lr"] == 1e-4 and by_id[id(enc)]["weight_decay"] == 0.01
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


def trained_runtime_folder(base, root, tmp_path, steps, precision="fp32"):
    """A tiny trained checkpoint and the ONNX runtime model folder built from it (fp32; int8
    folders get a streaming graph too, as build-engine makes them)."""
    pytest.importorskip("onnxruntime")
    from streampunct.cli import main as cli

    teacher = run(tiny_config(base, root, tmp_path / "t", f"optim.max_steps={steps}"))
    folder = tmp_path / "runtime"
    assert cli(["build-engine", "--model", str(teacher.best_dir), "--backend", "onnxruntime",
                "--precision", precision, "--out", str(folder)]) == 0
    return teacher, folder


def test_runtime_model_folder_as_teacher(tiny_base_model, tiny_data_root, tmp_path):
    """A runtime model folder (ONNX + streampunct.json, like models/default) can teach."""
    from streampunct.core.decoder import OfflineDecoder
    from training.evaluation import RuntimeModel, is_runtime_model
    from training.self_training import runtime_pseudo_label

    teacher, folder = trained_runtime_folder(tiny_base_model, tiny_data_root, tmp_path, 20)
    assert is_runtime_model(folder) and not is_runtime_model(teacher.best_dir)

    # the ONNX teacher labels like the torch checkpoint it was built from
    t_model, t_meta = load_checkpoint(teacher.best_dir)
    from streampunct.core.windowing import WindowConfig

    unlabeled = load_unlabeled(["tedx"], data_root(str(tiny_data_root)), max_words=2_000, seed=0)
    torch_pseudo = pseudo_label(t_model, checkpoint_aligner(teacher.best_dir), unlabeled,
                                WindowConfig(**t_meta["window"]), batch_size=8)
    rt = RuntimeModel.open(folder)
    try:
        onnx_pseudo = runtime_pseudo_label(rt, unlabeled, batch_size=8)
    finally:
        rt.close()
    got = np.concatenate([d.labels for d in onnx_pseudo])
    want = np.concatenate([d.labels for d in torch_pseudo])
    assert all(d.pseudo for d in onnx_pseudo) and len(got) == len(want)
    assert np.mean(got == want) > 0.99

    cfg = tiny_config(tiny_base_model, tiny_data_root, tmp_path / "st", "optim.max_steps=2",
                      'method.kind="self_training"', "method.self_training.max_iterations=1",
                      f'method.self_training.teacher="{folder}"')
    run(cfg)
    record = json.loads((tmp_path / "st" / "self_training.json").read_text())
    assert record["teacher"]["dir"] == str(folder)
    # the teacher's validation F1 is the ONNX model's own figure on the validation set
    p = OfflineDecoder.from_model_dir(folder)
    try:
        from streampunct.evaluation.accuracy import offline_labels
        from streampunct.evaluation.scores import evaluate
        from training.data import load_validation_docs, resolve_cache

        docs = load_validation_docs("dev2010", data_root(str(tiny_data_root)),
                                    resolve_cache(str(tmp_path / "cache")))
        win = WindowConfig(30, 6, 4)
        gold = [x for d in docs for x in d.labels]
        pred = [x for d in docs for x in offline_labels(d.words, p.aligner, win, p.engine.infer)]
    finally:
        p.close()
    assert record["teacher"]["overall_f1"] == pytest.approx(round(evaluate(gold, pred).overall_f1, 2), abs=0.01)
    assert len(record["rounds"]) == 1 and record["rounds"][0]["dir"].endswith("student_1/best")


def test_window_tuning_of_a_runtime_model_folder(tiny_base_model, tiny_data_root, tmp_path):
    from streampunct.core.windowing import WindowConfig
    from training.data import load_validation_docs, resolve_cache
    from training.window_tuning import tune_model_folder, window_grid

    _, folder = trained_runtime_folder(tiny_base_model, tiny_data_root, tmp_path, 10)
    docs = load_validation_docs("dev2010", data_root(str(tiny_data_root)), resolve_cache(str(tmp_path / "cache")))
    grid = window_grid([30, 40], [4, 6, 40], [4], max_word_tokens=8)
    assert WindowConfig(40, 40, 4) not in grid and len(grid) == 4  # L + R + two words must fit
    chosen = tune_model_folder(folder, docs, grid)
    meta = json.loads((folder / "streampunct.json").read_text())
    rows = meta["window_tuning"]["grid"]
    assert meta["window"] == chosen == meta["window_tuning"]["chosen"]
    assert meta["window_tuning"]["engine"] == "onnxruntime" and len(rows) == 4
    best = max(r["overall_f1"] for r in rows)
    picked = [r for r in rows if r["overall_f1"] == best]
    # ties go to the larger step (W - L - R): the cheaper geometry
    assert chosen == {k: max(picked, key=lambda r: r["size"] - r["left"] - r["right"])[k]
                      for k in ("size", "left", "right")}


def test_window_search_tolerance_prefers_the_cheaper_geometry():
    from streampunct.core.windowing import WindowConfig
    from streampunct.evaluation.scores import evaluate
    from training.window_tuning import search_windows

    cheap, costly, worse = WindowConfig(126, 30, 15), WindowConfig(94, 40, 10), WindowConfig(126, 20, 10)
    gold = [0, 1, 0, 2, 0, 3, 0, 1, 0, 2]
    preds = {costly: gold, cheap: [0, 1, 0, 2, 0, 3, 0, 1, 0, 0], worse: [0] * 10}
    f1 = {w: evaluate(gold, p).overall_f1 for w, p in preds.items()}
    assert f1[costly] == 100.0 and 80 < f1[cheap] < 100 and f1[worse] == 0.0
    grid = list(preds)
    assert search_windows(lambda w: evaluate(gold, preds[w]), grid)[0] == costly
    # within 15 points the larger step wins; the far worse geometry never does
    assert search_windows(lambda w: evaluate(gold, preds[w]), grid, tolerance=15)[0] == cheap
    with pytest.raises(ValueError, match="tolerance"):
        search_windows(lambda w: evaluate(gold, preds[w]), grid, tolerance=-1)


def test_case_head_round_trip_and_training_signal(tiny_base_model, tiny_data_root, tmp_path):
    out = tmp_path / "case"
    result = run(tiny_config(tiny_base_model, tiny_data_root, out, "optim.max_steps=6", "model.case_head=true",
                             'data.train=["ted"]', "model.dropout=0.0"))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all("case" in r for r in rows if r["type"] == "train")  # TED text is cased: the head learns
    model, meta = load_checkpoint(result.best_dir)
    assert meta["head_config"]["case_head"] is True
    ids = torch.tensor([[101, 2054, 2003, 102]])
    mask = torch.ones_like(ids)
    with torch.no_grad():
        punct, case = model.forward_heads(ids, mask)
        torch.testing.assert_close(punct, model(ids, mask))
    assert case.shape == (1, 4, 4)


def test_stream_left_tuning_picks_the_least_left_context_within_tolerance(tiny_base_model, tiny_data_root,
                                                                           tmp_path):
    from streampunct.evaluation.scores import evaluate
    from streampunct.model import load_model_info
    from training.data import load_validation_docs, resolve_cache
    from training.window_tuning import live_score, tune_stream_left

    _, folder = trained_runtime_folder(tiny_base_model, tiny_data_root, tmp_path, 10)
    docs = load_validation_docs("dev2010", data_root(str(tiny_data_root)), resolve_cache(str(tmp_path / "cache")))
    gold = [x for d in docs for x in d.labels]
    offline = load_model_info(folder).window
    # A stand-in score: F1 rises with left context, by 1 point from 4 to 6, by 20 from 2 to 4.
    f1_of = {2: 60.0, 4: 80.0, 6: 81.0}
    seen = []

    def score(w):
        seen.append(w)
        right = round(len(gold) * f1_of[w.left] / 100)
        return evaluate(gold, gold[:right] + [0] * (len(gold) - right))

    chosen = tune_stream_left(folder, docs, [6, 2, 4], tolerance=2.0, score=score)
    assert chosen == {"left": 4}
    assert [w.left for w in seen] == [2, 4, 6] and {(w.size, w.right) for w in seen} == {(offline.size, offline.right)}
    meta = json.loads((folder / "streampunct.json").read_text())
    assert meta["stream_window"] == chosen and meta["stream_window_tuning"]["chosen"] == chosen
    assert [r["left"] for r in meta["stream_window_tuning"]["grid"]] == [2, 4, 6]
    info = load_model_info(folder)
    assert info.stream_window.left == 4 and info.window == offline  # offline decoding keeps its window
    assert tune_stream_left(folder, docs, [2, 4, 6], tolerance=0.0, score=score) == {"left": 6}
    with pytest.raises(ValueError, match="tolerance"):
        tune_stream_left(folder, docs, [2], tolerance=-1, score=score)
    # The real score: the tiny model's labels for the validation text as one live stream.
    from streampunct.core.decoder import OfflineDecoder

    words = [w for d in docs for w in d.words]
    punctuator = OfflineDecoder.from_model_dir(folder)
    try:
        report = live_score(punctuator, words, gold, info.stream_window)
    finally:
        punctuator.close()
    assert 0.0 <= report.overall_f1 <= 100.0 and sum(report.confusion.sum(axis=1)) == len(words)
    # Without a score, the folder's engine plays every candidate (opened once).
    assert tune_stream_left(folder, docs, [4, 6], tolerance=100.0) == {"left": 4}


def test_stream_cache_tuning_of_a_folder_with_a_streaming_graph(tiny_base_model, tiny_data_root, tmp_path,
                                                               monkeypatch, capsys):
    """The real score end to end: the tiny model's folder given its streaming graph
    (int8, as build-engine makes it), tuned by the CLI on its two default validation sets."""
    import training.data
    from engines.ort_engine import open_stream_engine
    from streampunct.model import load_model_info
    from training.window_tuning import choose_stream_cache
    from training.window_tuning import main as window_tuning

    from .conftest import cased_text

    _, folder = trained_runtime_folder(tiny_base_model, tiny_data_root, tmp_path, 10, precision="int8")
    assert load_model_info(folder).metadata["stream_artifact"] == "model.stream.int8.onnx"
    vw, vl = synthetic_words(150, seed=7)
    (tiny_data_root / "cased_spoken" / "swda_val_cased.txt").write_text(cased_text(vw, vl) + "\n", encoding="utf-8")
    monkeypatch.setattr(training.data, "resolve_cache", lambda _: tmp_path / "cache")  # not the repo's cache/
    assert window_tuning([str(folder), "--stream-cache-tokens", "12", "4", "--data-root", str(tiny_data_root)]) == 0
    meta = json.loads((folder / "streampunct.json").read_text())
    tuning = meta["stream_cache_tuning"]
    assert tuning["set"] == "dev2010 and SwDA validation (ted_iwslt_dev2010_cased.txt, swda_val_cased.txt)"
    assert tuning["stream"].endswith(", int8")
    assert [r["tokens"] for r in tuning["grid"]] == [4, 12] and set(tuning["without_cache"]) == {"dev2010", "swda_val"}
    choice = choose_stream_cache(tuning["grid"], tuning["without_cache"], ["dev2010", "swda_val"])
    assert meta["stream_cache_tokens"] == tuning["chosen"] == choice.tokens
    assert load_model_info(folder).stream_cache_auto == choice.enabled == ("stream_cache" not in meta)
    assert f"chosen stream_cache_tokens: {choice.tokens}" in capsys.readouterr().out
    engine = open_stream_engine(folder)
    try:
        assert engine.cache_tokens == choice.tokens  # what serve and evaluate --live now keep
    finally:
        engine.close()


def test_self_training_checks_what_its_rounds_need_before_the_teacher_trains(tiny_base_model, tiny_data_root,
                                                                            tmp_path):
    from streampunct.errors import InputError, ModelError

    base = ['method.kind="self_training"', "method.self_training.max_iterations=1", "optim.max_steps=2"]
    cfg = tiny_config(tiny_base_model, tiny_data_root, tmp_path / "a", *base, 'data.unlabeled=["nosuch"]')
    with pytest.raises(InputError, match="no such unlabeled file: .*nosuch \\(data.unlabeled takes tedx, "):
        run(cfg)
    cfg = tiny_config(tiny_base_model, tiny_data_root, tmp_path / "b", *base,
                      f'method.self_training.student_base_model="{tmp_path / "gone"}"')
    with pytest.raises(ModelError, match="gone is not a Hugging Face model folder"):
        run(cfg)
    assert not (tmp_path / "a" / "teacher").exists() and not (tmp_path / "b" / "teacher").exists()


@pytest.mark.parametrize("tune", [False, True])
def test_a_resumed_self_training_run_after_its_teacher_gives_the_same_students(tiny_base_model, tiny_data_root,
                                                                               tmp_path, tune):
    # a resume that skips the finished teacher built a different student (its draws followed the
    # teacher's run, window tuning included): each round now draws from its own seed
    import torch

    base = ['method.kind="self_training"', "method.self_training.max_iterations=1", "optim.max_steps=4",
            "model.dropout=0.1"]
    if tune:
        base += ["eval.tune_windows=true", "eval.tune_sizes=[30]", "eval.tune_lefts=[4,6]", "eval.tune_rights=[2,4]"]
    run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "whole", *base))
    cut = tmp_path / "cut"
    run(tiny_config(tiny_base_model, tiny_data_root, cut, *base))
    shutil.rmtree(cut / "student_1")  # as if killed before the student's first resume state
    (cut / "self_training.json").unlink()
    run(tiny_config(tiny_base_model, tiny_data_root, cut, *base), resume=True)
    a = torch.load(tmp_path / "whole" / "student_1" / "state.pt", weights_only=False)["model"]
    b = torch.load(cut / "student_1" / "state.pt", weights_only=False)["model"]
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0, msg=k)
    assert json.loads((cut / "self_training.json").read_text())["teacher"]["overall_f1"] == \
        json.loads((tmp_path / "whole" / "self_training.json").read_text())["teacher"]["overall_f1"]
