"""``streampunct build-engine``'s output folder: written whole or not at all, a rebuild leaves no
stale graph beside the new ones, and an --out it must not write into is refused before any work."""

from __future__ import annotations

import argparse
import hashlib
import json

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")


def build(*args):
    from streampunct.cli import main as cli

    return cli(["build-engine", "--backend", "onnxruntime", "--parity-lines", "200", *map(str, args)])


def snapshot(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_a_rebuild_replaces_the_build_and_keeps_what_is_not_its_own(tiny_checkpoint, tmp_path, capsys):
    out = tmp_path / "model"
    assert build("--model", tiny_checkpoint, "--out", out, "--precision", "int4") == 0
    (out / "MODEL_CARD.md").write_text("# tiny\n")
    assert build("--model", tiny_checkpoint, "--out", out, "--precision", "fp32") == 0
    names = {p.name for p in out.iterdir()}
    # the int4 graphs of the first build are gone: nothing picks a stale graph by its name
    assert names == {"model.onnx", "model.onnx.json", "tokenizer.json", "streampunct.json", "MODEL_CARD.md"}
    assert json.loads((out / "streampunct.json").read_text())["artifact"] == "model.onnx"
    assert not (tmp_path / ".model.building").exists() and not (out / ".building").exists()
    assert f"built onnxruntime fp32 from {tiny_checkpoint} into {out}" in capsys.readouterr().out


def test_an_interrupted_build_leaves_the_folder_as_it_was(tiny_checkpoint, tmp_path, monkeypatch, capsys):
    import engines.build.stream_graph

    out = tmp_path / "model"
    assert build("--model", tiny_checkpoint, "--out", out) == 0  # int8 with its streaming graph
    before = snapshot(out)

    def interrupted(*args, **kwargs):  # Ctrl-C in the last step, after streampunct.json was written
        raise KeyboardInterrupt

    monkeypatch.setattr(engines.build.stream_graph, "build_stream_artifact", interrupted)
    assert build("--model", tiny_checkpoint, "--out", out, "--precision", "int4") == 130
    assert snapshot(out) == before and not (out / ".building").exists()
    fresh = tmp_path / "fresh"
    assert build("--model", tiny_checkpoint, "--out", fresh) == 130
    assert not fresh.exists()  # no folder that loads as if whole


def test_an_out_it_must_not_write_into_is_refused_before_the_checkpoint_loads(tiny_checkpoint, tmp_path, monkeypatch,
                                                                               capsys):
    import shutil

    import training.checkpoint

    def not_loaded(*args, **kwargs):
        raise AssertionError("the checkpoint was loaded")

    monkeypatch.setattr(training.checkpoint, "load_checkpoint", not_loaded)
    other = shutil.copytree(tiny_checkpoint, tmp_path / "other_ckpt")
    assert build("--model", tiny_checkpoint, "--out", other) == 2
    assert f"--out {other} is a training checkpoint: the build would replace its streampunct.json" \
        in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert build("--model", tiny_checkpoint, "--out", tmp_path / "afile" / "sub") == 2
    assert capsys.readouterr().err.strip().endswith(
        f"error: cannot write --out {tmp_path / 'afile' / 'sub'}: {tmp_path / 'afile'} is a file, not a folder")


def test_options_a_build_does_not_use_are_named_in_a_warning(tiny_checkpoint, tmp_path, capsys):
    assert build("--model", tiny_checkpoint, "--out", tmp_path / "a", "--precision", "int4", "--max-len", "16",
                 "--workspace-gb", "1", "--full-range", "--quantize-embeddings") == 0
    err = capsys.readouterr().err
    assert ("streampunct build-engine: warning: --max-len, --workspace-gb, --full-range do nothing in this "
            "onnxruntime int4 build; ignored") in err
    assert build("--model", tiny_checkpoint, "--out", tmp_path / "b", "--precision", "fp32") == 0
    assert "warning" not in capsys.readouterr().err
    from training.build_engine import add_arguments, ignored_options

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--model", "m", "--out", "o", "--triton-repo", "tr", "--max-batch", "8"])
    assert ignored_options(args, "int8", False) == []  # the repository's plan entry takes it


def test_an_out_on_another_file_system_is_built_beside_its_files(tiny_checkpoint, tmp_path):
    # a stage beside a linked --out (a mount, a link to another disk) could not be renamed into
    # it (EXDEV) after the old files were gone: the stage is inside an existing --out
    from training.build_engine import _stage_folder

    out = tmp_path / "model"
    out.mkdir()
    assert _stage_folder(out) == out / ".building" and (out / ".building").is_dir()
    fresh = tmp_path / "fresh"
    assert _stage_folder(fresh) == tmp_path / ".fresh.building"
    assert build("--model", tiny_checkpoint, "--out", out, "--precision", "fp32") == 0
    assert json.loads((out / "streampunct.json").read_text())["artifact"] == "model.onnx"
    assert not (out / ".building").exists()
