"""training.recipe, release 4's default rebuilt stage by stage: the whole recipe end to end on a
tiny model and a tiny corpus (every stage for real, each check passing), a rerun that skips the
finished stages, and broken outputs caught by their stage's check."""

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from training.recipe import RECIPE, STAGES, Recipe, RecipeError, main  # noqa: E402
from training.run import run  # noqa: E402

from .conftest import cased_text, synthetic_words  # noqa: E402
from .test_train_tiny import tiny_config  # noqa: E402

#: The student's config made tiny: the tiny encoder, a few steps, windows that fit it.
TINY = ["model.random_init=true", "model.dropout=0.0", "data.max_len=32", "data.max_word_tokens=8",
        "optim.batch_size=4", "optim.lr=3e-3", "optim.head_lr=3e-3", "optim.warmup_ratio=0.0",
        "optim.max_steps=12", "optim.eval_every=6", "optim.log_every=2", "optim.checkpoint_minutes=0",
        "eval.window_size=30", "eval.window_left=6", "eval.window_right=4", "eval.batch_size=8",
        "eval.caption_marks_words=100"]


def complete_the_corpus(root):
    """The transfer set's other sources and SwDA validation, tiny."""
    def lines(seed, n):
        return [cased_text(*synthetic_words(12, seed=seed * 100 + k)) for k in range(n)]

    (root / "cased_spoken" / "swda_train_cased.txt").write_text("\n".join(lines(8, 20)) + "\n", encoding="utf-8")
    (root / "cased_spoken" / "swda_val_cased.txt").write_text("\n".join(lines(9, 10)) + "\n", encoding="utf-8")
    for seed, name in ((10, "mrda_train.txt"), (11, "maptask_train.txt")):
        text = "\n".join(" ".join(synthetic_words(10, seed=seed * 100 + k)[0]) for k in range(15))
        (root / "unlabeled" / name).write_text(text + "\n", encoding="utf-8")


def test_the_recipe_rebuilds_a_tiny_model_stage_by_stage_and_resumes(
        tiny_base_model, tiny_data_root, tmp_path, monkeypatch, capsys):
    import benchmarks.mark_rate
    import training.data
    from streampunct.cli import main as cli

    complete_the_corpus(tiny_data_root)
    # one of the two caption talks held out (benchmarks.mark_rate, --exclude-held-out-captions);
    # converted text cached here, not in the repository's cache/
    draw = {"max_words": 150, "seed": 15}
    monkeypatch.setattr(training.data, "CAPTION_TRAINING_DRAW", draw)
    monkeypatch.setattr(benchmarks.mark_rate, "TRAINING_DRAW", draw)
    monkeypatch.setattr(training.data, "resolve_cache", lambda _: tmp_path / "cache")
    # the teacher-to-be (models/base's place): a tiny model with a case head, as a runtime folder
    teacher_run = run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "teacher_run", "optim.max_steps=10",
                                  "model.case_head=true", 'data.train=["dev2012", "ted"]'))
    teacher = tmp_path / "teacher"
    assert cli(["build-engine", "--model", str(teacher_run.best_dir), "--precision", "fp32",
                "--out", str(teacher)]) == 0

    out, soft = tmp_path / "release", tmp_path / "soft"
    args = ["--out", str(out), "--data-root", str(tiny_data_root), "--teacher", str(teacher),
            "--soft-labels", str(soft), "--shards", "3", "--shipped", str(teacher), "--in-process",
            "--set", f'model.base_model="{tiny_base_model}"', "--set", f'data.cache_dir="{tmp_path / "cache"}"',
            *(a for s in TINY for a in ("--set", s)), "--stream-lefts", "4", "6", "--stream-cache-tokens", "8", "16"]
    assert main(args) == 0
    r = Recipe(out=out, data_root=str(tiny_data_root), teacher=teacher, soft_labels=soft, shards=3)
    record = json.loads((out / "stages.json").read_text())
    assert list(record["stages"]) == list(STAGES)
    for name in STAGES:
        s = record["stages"][name]
        assert s["status"] == "done" and s["last"] == "ran" and s["seconds"] > 0 and s["peak_rss_mb"] > 0
        RECIPE[name].check(r)  # passes
    assert record["stages"]["label"]["commands"] == [
        f"python -m training.distill label --teacher {teacher} --labelled ted dev2012 swda --unlabeled tedx mrda "
        f"maptask --exclude-held-out-captions --seed 13 --shards 3 --out {soft} --data-root {tiny_data_root}"]
    assert sorted(p.name for p in soft.iterdir()) == [f"shard_00{k}_of_003.npz" for k in range(3)]
    meta = json.loads((out / "model" / "streampunct.json").read_text())
    assert meta["artifact"] == "model.int8.onnx" and meta["stream_artifact"]
    from engines.build.static_scales import has_static_scales
    from engines.sidecar import read_sidecar

    assert has_static_scales(read_sidecar(out / "model" / meta["stream_artifact"]))  # rows that batch exactly
    assert record["stages"]["build"]["commands"][-1] == (
        f"python -m training.static_scales {out / 'model'} --data {tiny_data_root / 'iwslt2011_che' / 'dev2012'}")
    assert [row["left"] for row in meta["stream_window_tuning"]["grid"]] == [4, 6]
    assert (out / "compare" / "compare_dev2010.json").is_file()
    assert (out / "learning_curve.json").is_file()

    # a rerun skips every finished stage: nothing runs
    import training.recipe

    real_run = training.recipe.run_in_process
    monkeypatch.setattr(training.recipe, "run_in_process", lambda c: pytest.fail(f"ran {c}"))
    assert main(args) == 0
    again = json.loads((out / "stages.json").read_text())["stages"]
    assert all(again[n]["last"] == "skipped" and again[n]["seconds"] == record["stages"][n]["seconds"]
               for n in STAGES)

    # a tuned key gone: tune's check says so; the next run resumes there (tune, then compare)
    meta.pop("case_margin_tuning")
    (out / "model" / "streampunct.json").write_text(json.dumps(meta))
    capsys.readouterr()
    assert main([*args, "--check"]) == 2
    err = capsys.readouterr().err
    assert "error: tune: " in err and "streampunct.json lacks case_margin_tuning: run the stage" in err
    monkeypatch.setattr(training.recipe, "run_in_process", real_run)
    assert main(args) == 0
    again = json.loads((out / "stages.json").read_text())["stages"]
    assert [again[n]["last"] for n in STAGES] == ["skipped"] * 3 + ["ran"] * 2
    for name in STAGES:
        RECIPE[name].check(r)
    # --only runs one stage, whatever its check says, once the earlier ones are done
    (out / "compare" / "compare_dev2010.json").write_text("{}")
    assert main([*args, "--only", "compare"]) == 0
    assert "models" in json.loads((out / "compare" / "compare_dev2010.json").read_text())
    assert json.loads((out / "stages.json").read_text())["stages"]["tune"] == again["tune"]

    # tune's guard may switch auto's cache off: the build (its streaming graph) is still whole
    meta = json.loads((out / "model" / "streampunct.json").read_text())
    (out / "model" / "streampunct.json").write_text(json.dumps({**meta, "stream_cache": False}))
    for name in STAGES:
        RECIPE[name].check(r)

    # broken outputs, each caught by its stage's check with what is wrong
    meta.pop("case_margin_tuning", None)
    (out / "model" / "streampunct.json").write_text(json.dumps(meta))
    with pytest.raises(RecipeError, match=r"^tune: .*streampunct.json lacks case_margin_tuning: run the stage"):
        RECIPE["tune"].check(r)
    (out / "model" / "streampunct.json").write_text("{not json")
    with pytest.raises(RecipeError, match=r"^build: .*does not load or punctuate"):
        RECIPE["build"].check(r)
    with pytest.raises(RecipeError, match=r"^tune: .*invalid JSON.*run build and tune again"):
        RECIPE["tune"].check(r)
    (soft / "shard_001_of_003.npz").unlink()
    with pytest.raises(RecipeError, match=r"^label: 1 of 3 shards missing in .*\(shard_001_of_003.npz\)"):
        RECIPE["label"].check(r)
    (out / "compare" / "mark_rate.json").unlink()
    with pytest.raises(RecipeError, match=r"^compare: .*mark_rate.json is missing"):
        RECIPE["compare"].check(r)


def test_a_command_runs_in_its_own_process_with_its_status_and_peak_memory():
    from training.recipe import cmd, run_child

    rc, rss, signalled = run_child(cmd("training.recipe", "--help"))
    assert rc == 0 and rss > 10 and not signalled
    assert run_child(cmd("training.recipe", "--only", "nope"))[0] == 2  # argparse's status


def test_no_data_folder_or_teacher_is_a_clear_error(tmp_path, capsys):
    base = ["--out", str(tmp_path / "o"), "--in-process"]
    assert main([*base, "--data-root", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in (err := capsys.readouterr().err) and "docs/data.md" in err
    (tmp_path / "data").mkdir()
    assert main([*base, "--data-root", str(tmp_path / "data"), "--teacher", str(tmp_path / "none"),
                 "--soft-labels", str(tmp_path / "soft")]) == 2
    assert f"label: no teacher at {tmp_path / 'none'}" in capsys.readouterr().err


def test_a_bad_override_or_shard_count_is_refused_before_any_stage(tmp_path, capsys, monkeypatch):
    """A --set the config refuses would otherwise surface at train, after hours of labelling."""
    from training import distill

    monkeypatch.setattr(distill, "label_shard_dir", lambda *a, **k: pytest.fail("labelled before the check"))
    (tmp_path / "data").mkdir()
    base = ["--out", str(tmp_path / "o"), "--in-process", "--data-root", str(tmp_path / "data"),
            "--soft-labels", str(tmp_path / "soft")]
    assert main([*base, "--set", "optim.bogus=1"]) == 2
    assert "train: the config does not read with the --set values: unknown config key(s) bogus" in \
        capsys.readouterr().err
    for shards in ("0", "-1"):
        with pytest.raises(SystemExit):
            main([*base, "--shards", shards])
        assert f"--shards must be >= 1, got {shards}" in capsys.readouterr().err
    assert not (tmp_path / "soft").exists()
