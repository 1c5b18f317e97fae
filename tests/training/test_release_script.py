"""scripts/release.sh, the shipped models' recipe: each step runs the commands of the model's
recipe on the right folders (python and streampunct replaced by stand-ins that record their
arguments), and a wrong model or step is a usage error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "release.sh"


def run_step(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    log = tmp_path / "calls.log"
    log.touch()
    py = tmp_path / "py"
    # `python -c ...` (small reads of configs and folders) runs for real; everything else is recorded
    py.write_text(f'#!/bin/bash\nif [ "$1" = "-c" ]; then exec {sys.executable} "$@"; fi\n'
                  f'echo "py $*" >> {log}\ncat > /dev/null\n')
    sp = tmp_path / "sp"
    sp.write_text(f'#!/bin/bash\necho "sp $*" >> {log}\n')
    py.chmod(0o755)
    sp.chmod(0o755)
    r = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "LPY": str(py), "LSP": str(sp),
                            "OUT": str(tmp_path / "out"), **env})
    return r, log.read_text().splitlines()


@pytest.mark.parametrize("args", [[], ["nope", "train"], ["default"], ["base", "nope"]])
def test_a_wrong_model_or_step_prints_usage(tmp_path, args):
    r, calls = run_step(tmp_path, *args)
    assert r.returncode == 2
    assert "usage: release.sh default|base" in r.stderr
    assert calls == []


def test_default_trains_its_config_from_the_gpu_student(tmp_path):
    start = tmp_path / "student"
    r, calls = run_step(tmp_path, "default", "train", START=str(start))
    assert r.returncode == 3 and f"no checkpoint {start}" in r.stderr and calls == []  # before any labelling
    start.mkdir()
    (start / "model.safetensors").touch()
    r, calls = run_step(tmp_path, "default", "train", START=str(start))
    assert r.returncode == 0, r.stderr
    assert (f"py -m training.cli --config training/configs/release_v6_repair.toml "
            f"--base-model {start} --resume") in calls
    assert calls[-1] == f"py -m training.learning_curve checkpoints/release_v6_repair --out {tmp_path}/out/learning_curve"


def test_default_build_and_tune_use_the_int8_graph_and_its_grids(tmp_path):
    r, calls = run_step(tmp_path, "default", "build", BUILD="build/x")
    assert r.returncode == 0, r.stderr
    assert calls == ["sp build-engine --model checkpoints/release_v6_repair/best --backend onnxruntime "
                     "--precision int8 --quantize-embeddings --out build/x",
                     "py -m training.static_scales build/x --data ../shared/data/iwslt2011_che/dev2012"]
    (tmp_path / "t").mkdir()
    r, calls = run_step(tmp_path / "t", "default", "tune", BUILD="build/x")
    assert r.returncode == 0, r.stderr
    assert calls == [
        "py -m training.window_tuning build/x --sizes 126 --lefts 20 40 --rights 10 --tolerance 0.5",
        "py -m training.window_tuning build/x --stream-lefts 20 25 30 40",
        "py -m training.window_tuning build/x --stream-cache-tokens 25 40 60 80 100",
        "py -m training.case_margin build/x --data ../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt "
        "../shared/data/cased_spoken/swda_val_cased.txt --write",
    ]


def release2(tmp_path: Path) -> Path:
    """A stand-in for release 2's models/base extracted from git (the script extracts it once)."""
    folder = tmp_path / "r2" / "models" / "base"
    folder.mkdir(parents=True)
    (folder / "streampunct.json").write_text("{}")
    return tmp_path / "r2"


def test_base_builds_4_bit_weights_of_the_mix_with_release_2s_windows(tmp_path):
    build, r2 = tmp_path / "b", release2(tmp_path)
    r, calls = run_step(tmp_path, "base", "build", BUILD=str(build), RELEASE2_DIR=str(r2))
    assert r.returncode == 0, r.stderr
    assert calls == [f"sp build-engine --model checkpoints/release3_base --backend onnxruntime "
                     f"--precision int4 --quantize-embeddings --out {build}",
                     f"py - {build} {r2}/models/base"]


def test_base_trains_the_teacher_to_step_150_repairs_it_and_mixes_it_with_release_2(tmp_path):
    start, r2 = tmp_path / "teacher", release2(tmp_path)
    r, calls = run_step(tmp_path, "base", "train", START=str(start), RELEASE2_DIR=str(r2))
    assert r.returncode == 3 and f"no checkpoint {start}" in r.stderr and calls == []  # GPU run 5's teacher first
    start.mkdir()
    (start / "model.safetensors").touch()
    r, calls = run_step(tmp_path, "base", "train", START=str(start), RELEASE2_DIR=str(r2))
    assert r.returncode == 0, r.stderr
    assert calls == [
        f"py -m training.cli --config training/configs/release3_teacher.toml --base-model {start} "
        "--out checkpoints/release3_teacher_150 --set optim.stop_step=150 --resume",
        "py -m training.cli --config training/configs/release3_teacher_repair.toml "
        "--base-model checkpoints/release3_teacher_150/best --resume",
        f"py -m training.learning_curve checkpoints/release3_teacher_repair --out {tmp_path}/out/learning_curve",
        f"py -m training.interpolate {r2}/models/base checkpoints/release3_teacher_repair/best --t 0.5 "
        "--dither 0.5 --seed 16 --out checkpoints/release3_base",
    ]


def test_base_tunes_only_the_case_margin(tmp_path):
    r, calls = run_step(tmp_path, "base", "tune", BUILD="build/x")
    assert r.returncode == 0, r.stderr
    assert calls == ["py -m training.case_margin build/x --data ../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt "
                     "../shared/data/cased_spoken/swda_val_cased.txt --write"]


def test_a_config_override_names_the_checkpoint(tmp_path):
    cfg = tmp_path / "mine.toml"
    cfg.write_text('name = "mine"\n')
    r, calls = run_step(tmp_path, "default", "build", CONFIG=str(cfg), BUILD="build/m")
    assert r.returncode == 0, r.stderr
    assert calls[0].startswith("sp build-engine --model checkpoints/mine/best ")
    r, _ = run_step(tmp_path, "default", "build", CONFIG=str(tmp_path / "missing.toml"))
    assert r.returncode == 2
    assert "no config" in r.stderr


def test_compare_names_each_models_figures_by_role_and_reads_the_data_folder(tmp_path):
    """models/default and build/default share a folder name: their figures must not overwrite."""
    r, calls = run_step(tmp_path, "default", "compare", BUILD="build/default", STREAMPUNCT_DATA="/data")
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out"
    for role, model in (("shipped", "models/default"), ("candidate", "build/default")):
        assert (f"py -m streampunct.evaluation.case --model {model} --data "
                f"/data/cased_spoken/ted_iwslt_dev2010_cased.txt --json {out}/case_dev2010_{role}.json") in calls
        for valid in ("ted_iwslt_dev2010", "swda_val"):
            assert (f"sp evaluate --model {model} --text --data /data/cased_spoken/{valid}_cased.txt --live "
                    f"--json {out}/live_{valid}_{role}.json") in calls
    jsons = [c.split("--json ")[1] for c in calls if "--json " in c]
    assert len(jsons) == len(set(jsons))
    (tmp_path / "t").mkdir()
    r, calls = run_step(tmp_path / "t", "base", "tune", BUILD="build/x", STREAMPUNCT_DATA="/data")
    assert calls == ["py -m training.case_margin build/x --data /data/cased_spoken/ted_iwslt_dev2010_cased.txt "
                     "/data/cased_spoken/swda_val_cased.txt --write"]
