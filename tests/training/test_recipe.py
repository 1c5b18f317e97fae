"""training.recipe, release 4's default rebuilt stage by stage: the whole recipe end to end on a
tiny model and a tiny corpus (every stage for real, each check passing), a rerun that skips the
finished stages, and broken outputs caught by their stage's check."""

import json
import shutil

import pytest

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

from training.recipe import RECIPE, STAGES, Recipe, RecipeError, main  # noqa: E402
from training.run import run  # noqa: E402

from .conftest import cased_text, synthetic_words, write_tiny_data_root  # noqa: E402
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


def tiny_recipe(tiny_base_model, tiny_data_root, tmp_path, monkeypatch):
    """The tiny recipe's arguments, as the command line takes them (a tiny teacher built, the
    corpus completed): ``(args, out, soft, teacher)``. The caption draw is the release's own
    (400,000 words, more than the tiny folder holds: fitted to it, so that one of its two caption
    talks is held out for compare's mark rate), as from the command line."""
    from streampunct.cli import main as cli
    from training.data import CACHE_ENV

    complete_the_corpus(tiny_data_root)
    # converted text cached here, not in the repository's cache/ (as $STREAMPUNCT_CACHE does
    # from the command line; the commands run in child processes read it too)
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
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
    return args, out, soft, teacher


@pytest.fixture(scope="module")
def recipe_run_once(tiny_base_model, tmp_path_factory):
    """The tiny recipe (:func:`tiny_recipe`) run once from scratch, ``main(args) == 0``, in a
    folder of its own, and a copy of that folder as the run left it: ``(work, copy, args, out,
    soft, teacher)``. The tests below each start from that run (it takes most of their time)."""
    work = tmp_path_factory.mktemp("recipe") / "work"
    with pytest.MonkeyPatch.context() as mp:
        args, out, soft, teacher = tiny_recipe(tiny_base_model, write_tiny_data_root(work / "data"), work, mp)
        assert main(args) == 0
    copy = work.parent / "as_run"
    shutil.copytree(work, copy, symlinks=True)
    return work, copy, args, out, soft, teacher


@pytest.fixture
def recipe_run(recipe_run_once, monkeypatch):
    """The folder of :func:`recipe_run_once` put back as the run left it, in the same place (the
    record holds its paths), with the data cache of :func:`tiny_recipe`: ``(args, out, soft,
    teacher, data_root)``; a test changes it as it likes."""
    from training.data import CACHE_ENV

    work, copy, args, out, soft, teacher = recipe_run_once
    shutil.rmtree(work)
    shutil.copytree(copy, work, symlinks=True)
    monkeypatch.setenv(CACHE_ENV, str(work / "cache"))
    return args, out, soft, teacher, work / "data"


def test_the_recipe_rebuilds_a_tiny_model_stage_by_stage_and_resumes(recipe_run, monkeypatch, capsys):
    args, out, soft, teacher, tiny_data_root = recipe_run  # main(args) == 0 from scratch
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
    # mark_rate measured the caption talk that the draw, fitted to the tiny folder, held out; and
    # so does its command in a child process, as the command line runs it (no state of this one)
    assert json.loads((out / "compare" / "mark_rate.json").read_text())["captions_words"] == 150
    from training.recipe import compare_commands, run_child

    (mark_rate,) = [c for c in compare_commands(r) if c.module == "benchmarks.mark_rate"]
    (out / "compare" / "mark_rate.json").unlink()
    assert run_child(mark_rate)[0] == 0
    assert json.loads((out / "compare" / "mark_rate.json").read_text())["captions_words"] == 150

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


def test_a_stage_whose_inputs_changed_is_not_skipped_and_a_changed_training_is_refused(
        recipe_run, monkeypatch, capsys):
    """Each stage's inputs are those it ran with, or it reruns: a changed --set is refused up
    front (the checkpoint was trained without it), relabelled shards refuse a resume of the
    finished training, a retrained checkpoint rebuilds the model, changed grids retune."""
    import training.recipe
    from engines.sidecar import read_sidecar
    from training.add_stream_graph import checkpoint_source

    args, out, soft, teacher, tiny_data_root = recipe_run  # main(args) == 0 from scratch
    r = Recipe(out=out, data_root=str(tiny_data_root), teacher=teacher, soft_labels=soft, shards=3)
    real_run = training.recipe.run_in_process
    ran = []

    def recording(c):
        ran.append(c.module)
        return real_run(c)

    # a changed --set: refused before any stage, naming the key; stages.json claims nothing
    before = (out / "stages.json").read_text()
    monkeypatch.setattr(training.recipe, "run_in_process", lambda c: pytest.fail(f"ran {c}"))
    capsys.readouterr()
    assert main([*args, "--set", "optim.max_steps=14"]) == 2
    err = capsys.readouterr().err
    assert f"error: train: {out / 'checkpoint'} was trained with other inputs (optim.max_steps 12 -> 14)" in err
    assert "move it away" in err and len(err.strip().splitlines()) == 1
    assert (out / "stages.json").read_text() == before
    assert main([*args, "--set", "optim.max_steps=14", "--check"]) == 2
    assert "trained with other inputs" in capsys.readouterr().err
    # how the run goes (threads, logging cadence) is no other training: checked as done
    assert main([*args, "--set", "optim.threads=1", "--set", "optim.log_every=3", "--check"]) == 0

    # changed tune grids: tune and compare run again (build stays)
    monkeypatch.setattr(training.recipe, "run_in_process", recording)
    assert main([*args[:-6], "--stream-lefts", "4", "--stream-cache-tokens", "8", "16"]) == 0
    stages = json.loads((out / "stages.json").read_text())["stages"]
    assert [stages[n]["last"] for n in STAGES] == ["skipped"] * 3 + ["ran"] * 2
    meta = json.loads((out / "model" / "streampunct.json").read_text())
    assert [row["left"] for row in meta["stream_window_tuning"]["grid"]] == [4]
    assert main(args) == 0  # and back
    stages = json.loads((out / "stages.json").read_text())["stages"]
    assert [stages[n]["last"] for n in STAGES] == ["skipped"] * 3 + ["ran"] * 2

    # retrained (only train, as a run stopped before build would leave it): build runs again
    (out / "checkpoint" / "best" / "streampunct.json").write_text(json.dumps(
        {**json.loads((out / "checkpoint" / "best" / "streampunct.json").read_text()), "retrained": True}))
    with pytest.raises(RecipeError, match=r"^build: .*was built from another checkpoint than .*best"):
        RECIPE["build"].check(r)
    ran.clear()
    assert main(args) == 0
    stages = json.loads((out / "stages.json").read_text())["stages"]
    assert [stages[n]["last"] for n in STAGES] == ["skipped"] * 2 + ["ran"] * 3
    assert read_sidecar(out / "model" / "model.int8.onnx").source_sha256 == checkpoint_source(out / "checkpoint" / "best")

    # the data changed and the shards moved away: label relabels, and the finished training on
    # the old shards is neither resumed nor kept: refused until it is moved away
    with open(tiny_data_root / "unlabeled" / "mrda_train.txt", "a", encoding="utf-8") as f:
        f.write("the cat sat on the mat however we saw it today there indeed\n")
    for p in soft.iterdir():
        p.unlink()
    ran.clear()
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"error: train: {out / 'checkpoint'} was trained with other inputs (the shards in {soft} (relabelled))" in err
    assert ran == ["training.distill"]
    (out / "checkpoint").rename(out / "checkpoint.old")
    assert main(args) == 0
    stages = json.loads((out / "stages.json").read_text())["stages"]
    assert [stages[n]["last"] for n in STAGES] == ["skipped"] + ["ran"] * 4
    assert stages["train"]["runs"] == 1
    assert stages["train"]["inputs"]["overrides"] == [a for a, before in zip(args[1:], args[:-1], strict=True) if before == "--set"]
    for name in STAGES:
        RECIPE[name].check(r)


def test_a_folder_with_one_caption_talk_is_refused_before_any_stage_that_reaches_compare(
        tiny_data_root, tmp_path, capsys, monkeypatch):
    """compare's mark rate reads caption talks held out from the training draw: a data folder
    with one talk has none, said before labelling and training, not at compare."""
    import gzip

    from training import distill

    monkeypatch.setattr(distill, "label_shard_dir", lambda *a, **k: pytest.fail("labelled before the check"))
    captions = tiny_data_root / "unlabeled" / "tedx_autocaptions.txt.gz"
    with gzip.open(captions, "wt", encoding="utf-8") as f:
        f.write("the cat sat on the mat\n\n")
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "streampunct.json").write_text("{}")
    base = ["--out", str(tmp_path / "o"), "--in-process", "--data-root", str(tiny_data_root),
            "--teacher", str(tmp_path / "none"), "--soft-labels", str(tmp_path / "soft"), "--shipped", str(shipped)]
    for extra in ([], ["--from", "train"], ["--only", "compare"]):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert f"error: compare: {captions} holds 1 caption talk (one a line): compare's mark rate needs talks " \
               "held out from the training draw, so at least two" in err
    assert not (tmp_path / "o" / "stages.json").exists()
    assert main([*base, "--only", "label"]) == 2  # compare does not run: not asked
    assert "label: no teacher" in capsys.readouterr().err


def test_a_late_stages_bad_argument_is_refused_before_any_stage(tmp_path, capsys, monkeypatch):
    from training import distill

    monkeypatch.setattr(distill, "label_shard_dir", lambda *a, **k: pytest.fail("labelled before the check"))
    (tmp_path / "data").mkdir()
    base = ["--out", str(tmp_path / "o"), "--in-process", "--data-root", str(tmp_path / "data"),
            "--soft-labels", str(tmp_path / "soft")]
    for bad, message in ((["--stream-lefts", "20", "-1"], "--stream-lefts must be >= 0, got 20 -1"),
                         (["--stream-cache-tokens", "0"], "--stream-cache-tokens must be >= 1, got 0"),
                         (["--shipped", str(tmp_path / "none")],
                          f"--shipped {tmp_path / 'none'}: no model folder there")):
        with pytest.raises(SystemExit) as e:
            main([*base, *bad])
        assert e.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "soft").exists() and not (tmp_path / "o").exists()


def test_a_second_recipe_in_the_same_folder_is_refused_while_the_first_or_its_command_runs(tmp_path, capsys):
    import socket
    import subprocess
    import sys

    (tmp_path / "data").mkdir()
    out = tmp_path / "o"
    out.mkdir()
    base = ["--out", str(out), "--in-process", "--data-root", str(tmp_path / "data"),
            "--teacher", str(tmp_path / "none"), "--soft-labels", str(tmp_path / "soft")]
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        # the recipe that took the lock is gone, the trainer it started is not
        (out / "recipe.lock").write_text(f"{socket.gethostname()} {gone.pid} {live.pid}")
        assert main(base) == 2
        assert f"error: lock: {out} is in use by process {live.pid} (another recipe" in capsys.readouterr().err
    finally:
        live.kill()
        live.wait()
    # both gone: taken over (then label finds no teacher), and released
    assert main(base) == 2
    assert "label: no teacher" in capsys.readouterr().err
    assert not (out / "recipe.lock").exists()
    (out / "recipe.lock").write_text(f"another-host {gone.pid}")
    assert main(base) == 2
    assert "recipe.lock is held by a recipe on another-host" in capsys.readouterr().err


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_command_dies_with_the_recipe(tmp_path):
    """A recipe killed outright (SIGKILL, SIGHUP) takes its command with it: no trainer runs on."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    (tmp_path / "sleeper.py").write_text(
        "import os, pathlib, time\n"
        f"pathlib.Path({str(tmp_path / 'pid')!r}).write_text(str(os.getpid()))\n"
        "time.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.getcwd()])}
    recipe = subprocess.Popen([sys.executable, "-c", "from training.recipe import cmd, run_child; "
                               "run_child(cmd('sleeper'))"], env=env)
    deadline = time.monotonic() + 60
    while not (tmp_path / "pid").is_file() or not (tmp_path / "pid").read_text():
        assert time.monotonic() < deadline and recipe.poll() is None
        time.sleep(0.05)
    child = int((tmp_path / "pid").read_text())

    def running() -> bool:
        try:
            return Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
        except OSError:
            return False

    assert running()
    recipe.send_signal(signal.SIGKILL)
    recipe.wait()
    deadline = time.monotonic() + 10
    while running() and time.monotonic() < deadline:
        time.sleep(0.05)
    if running():
        os.kill(child, signal.SIGKILL)
        pytest.fail("the command outlived the recipe")
