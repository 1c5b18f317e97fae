"""scripts/gpu_release.sh, the parts that run here: the teacher's checkpoint (fp16 weights) put
back together from the parts that the device calls returned, in part order, whichever call
brought each, with fp32 weights; and stage c's parts, four a call."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "gpu_release.sh"
PART = 1000  # bytes a part (the device uses 15 MB)


WEIGHTS = {"encoder.w": np.arange(600, dtype=np.float32).reshape(20, 30) / 7, "steps": np.arange(3)}


def teacher_tar(tmp: Path) -> bytes:
    """The tar stage b's teacher_pack writes: teacher_f16/ with fp16 weights and the sidecars."""
    st = tmp / "f16.safetensors"
    save_file({k: v.astype(np.float16) if v.dtype.kind == "f" else v for k, v in WEIGHTS.items()}, str(st))
    files = {"teacher_f16/model.safetensors": st.read_bytes(), "teacher_f16/streampunct.json": b"{}",
             "teacher_f16/tokenizer.json": b'{"model": {}}', "teacher_f16/config.json": b"{}"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def split_into_calls(data: bytes, tmp: Path, *, drop: int | None = None) -> list[Path]:
    """Parts as the device writes them (part00, part01, ...), four per call folder."""
    parts = [data[i : i + PART] for i in range(0, len(data), PART)]
    calls = []
    for k in range(0, len(parts), 4):
        d = tmp / f"call{k // 4}"
        d.mkdir()
        for i in range(k, min(k + 4, len(parts))):
            if i != drop:
                (d / f"teacher_f16.tar.part{i:02d}").write_bytes(parts[i])
        (d / "teacher_parts_total.txt").write_text(f"{len(parts)}\n")
        calls.append(d)
    return calls


def unpack(calls: list[Path], dest: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), "unpack-teacher", *map(str, calls)], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "TEACHER_OUT": str(dest), "LPY": sys.executable}, timeout=60)


def test_parts_from_several_calls_make_an_fp32_checkpoint(tmp_path):
    data = teacher_tar(tmp_path)
    calls = split_into_calls(data, tmp_path)
    assert len(calls) >= 2  # more than four parts: a later call brings the rest
    dest = tmp_path / "out" / "gpu_teacher" / "best"
    # the later call named first: the order comes from the part names, not the arguments
    r = unpack(list(reversed(calls)), dest)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "model.safetensors", "streampunct.json",
                                                      "tokenizer.json"]
    got = load_file(str(dest / "model.safetensors"))
    assert got["encoder.w"].dtype == np.float32
    np.testing.assert_allclose(got["encoder.w"], WEIGHTS["encoder.w"].astype(np.float16).astype(np.float32))
    assert got["steps"].tolist() == [0, 1, 2]  # integers stay integers


def test_a_missing_part_is_an_error_and_writes_nothing(tmp_path):
    data = teacher_tar(tmp_path)
    n = -(-len(data) // PART)
    calls = split_into_calls(data, tmp_path, drop=2)
    dest = tmp_path / "gpu_teacher"
    r = unpack(calls, dest)
    assert r.returncode == 3
    assert f"have {n - 1} of {n} parts" in r.stderr
    assert not dest.exists()


def test_unknown_stage_prints_usage(tmp_path):
    r = subprocess.run(["bash", str(SCRIPT), "nope"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2
    assert "usage: gpu_release.sh" in r.stderr


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])


def test_stage_c_returns_the_parts_built_in_b_four_a_call(tmp_path):
    """Stage b leaves the parts and a done mark in the work folder; ``c 0`` copies parts 0-3,
    ``c 1`` the rest, each with the total, and builds nothing."""
    work = tmp_path / "g"
    (work / "teacher" / "best").mkdir(parents=True)
    for i in range(6):
        (work / f"teacher_f16.tar.part{i:02d}").write_bytes(bytes([i]) * 10)
    (work / "teacher_f16.done").touch()
    got = {}
    for k in (0, 1):
        out = tmp_path / f"out{k}"
        out.mkdir()
        r = subprocess.run(["bash", str(SCRIPT), "c", str(k)], capture_output=True, text=True, timeout=60,
                           env={"PATH": "/usr/bin:/bin", "GPU_WORK": str(work), "OUT": str(out), "PY": "false"})
        assert r.returncode == 0, r.stderr
        assert (out / "teacher_parts_total.txt").read_text().strip() == "6"
        got[k] = sorted(p.name for p in out.glob("teacher_f16.tar.part*"))
    assert got[0] == [f"teacher_f16.tar.part{i:02d}" for i in range(4)]
    assert got[1] == ["teacher_f16.tar.part04", "teacher_f16.tar.part05"]


def test_stage_c_without_a_trained_teacher_says_so(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run(["bash", str(SCRIPT), "c", "0"], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "GPU_WORK": str(tmp_path / "g"), "OUT": str(out)})
    assert r.returncode == 3
    assert "run stage b on this machine first" in r.stderr


def test_stage_c_packs_the_teacher_when_b_did_not_and_unpack_restores_it(tmp_path):
    """teacher_pack end to end: a checkpoint with fp32 weights, packed as fp16 by ``c 0`` on the
    device side, unpacked here into fp32 weights equal to the fp16 rounding of the originals."""
    work = tmp_path / "g"
    best = work / "teacher" / "best"
    best.mkdir(parents=True)
    save_file(WEIGHTS, str(best / "model.safetensors"))
    (best / "config.json").write_text('{"model_type": "mpnet"}')
    (best / "head.safetensors").write_bytes(b"head")
    out = tmp_path / "out0"
    out.mkdir()
    r = subprocess.run(["bash", str(SCRIPT), "c", "0"], capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/bin:/bin", "GPU_WORK": str(work), "OUT": str(out), "PY": sys.executable})
    assert r.returncode == 0, r.stderr
    assert (work / "teacher_f16.done").exists()
    assert (out / "teacher_parts_total.txt").read_text().strip() == "1"
    dest = tmp_path / "ckpt"
    r = unpack([out], dest)
    assert r.returncode == 0, r.stderr
    assert (dest / "config.json").read_text() == '{"model_type": "mpnet"}'
    assert (dest / "head.safetensors").read_bytes() == b"head"
    got = load_file(str(dest / "model.safetensors"))
    np.testing.assert_allclose(got["encoder.w"], WEIGHTS["encoder.w"], rtol=1e-3)
    assert got["encoder.w"].dtype == np.float32


def test_a_teacher_carried_up_in_parts_is_assembled_on_the_device(tmp_path):
    """An earlier GPU run's teacher continues: pack-up (here, as prepare does) cuts its checkpoint
    into one folder per part; each device call "t K" copies one part into the work folder after
    stage a; b assembles them (assemble-up) into teacher_init with fp32 weights."""
    src = tmp_path / "gpu_teacher" / "best"
    src.mkdir(parents=True)
    save_file(WEIGHTS, str(src / "model.safetensors"))
    (src / "config.json").write_text('{"model_type": "mpnet"}')
    up = tmp_path / "up" / "gpuT"
    up.parent.mkdir()
    env = {"PATH": "/usr/bin:/bin", "UP_DIR": str(up), "UP_BYTES": "700", "LPY": sys.executable,
           "PY": sys.executable, "GPU_WORK": str(tmp_path / "g")}

    def run(*args):
        return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=120, env=env)

    r = run("pack-up", str(src))
    assert r.returncode == 0, r.stderr
    folders = sorted(up.parent.iterdir())
    n = len(folders)
    assert n >= 3 and f"t 0 .. t {n - 1}" in r.stdout
    assert all((f / "total").read_text().strip() == str(n) for f in folders)
    r = run("t", "0")
    assert r.returncode == 3 and "run stage a on this machine first" in r.stderr
    (tmp_path / "g" / "cfg").mkdir(parents=True)  # what stage a leaves
    for k in range(n - 1):
        assert run("t", str(k)).returncode == 0
    r = run("assemble-up")
    assert r.returncode == 3 and f"have {n - 1} of {n} teacher parts" in r.stderr
    assert run("t", str(n - 1)).returncode == 0
    r = run("assemble-up")
    assert r.returncode == 0, r.stderr
    init = tmp_path / "g" / "teacher_init"
    assert (init / "config.json").read_text() == '{"model_type": "mpnet"}'
    got = load_file(str(init / "model.safetensors"))
    assert got["encoder.w"].dtype == np.float32
    np.testing.assert_allclose(got["encoder.w"], WEIGHTS["encoder.w"], rtol=1e-3)
    assert got["steps"].tolist() == [0, 1, 2]


def run_stage(args: list[str], work: Path, out: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    full = {"PATH": "/usr/bin:/bin", "GPU_WORK": str(work), "PY": "false", **env}
    if out is not None:
        full["OUT"] = str(out)
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=60, env=full)


def test_stage_s_returns_the_mpnet4_students_parts_four_a_call(tmp_path):
    """STUDENT=mpnet4: b leaves the student's parts in the work folder (too large for b's
    return); ``s 0`` copies parts 0-3, ``s 1`` the rest, each with the total."""
    work = tmp_path / "g"
    work.mkdir()
    for i in range(7):
        (work / f"student_f16.tar.part{i:02d}").write_bytes(bytes([i]) * 10)
    (work / "teacher_f16.tar.part00").write_bytes(b"t")  # the teacher's parts are stage c's
    got = {}
    for k in (0, 1):
        out = tmp_path / f"s{k}"
        out.mkdir()
        r = run_stage(["s", str(k)], work, out)
        assert r.returncode == 0, r.stderr
        assert (out / "student_parts_total.txt").read_text().strip() == "7"
        got[k] = sorted(p.name for p in out.iterdir() if p.name.startswith(("student_f16", "teacher_f16")))
    assert got[0] == [f"student_f16.tar.part{i:02d}" for i in range(4)]
    assert got[1] == [f"student_f16.tar.part{i:02d}" for i in range(4, 7)]


def test_stage_s_before_b_says_so(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = run_stage(["s", "0"], tmp_path / "g", out)
    assert r.returncode == 3
    assert "run stage b with STUDENT=mpnet4 on this machine first" in r.stderr
    assert list(out.iterdir()) == []


def test_an_unknown_student_is_refused(tmp_path):
    r = run_stage(["s", "0"], tmp_path / "g", tmp_path, STUDENT="minilm6")
    assert r.returncode == 2
    assert "STUDENT must be minilm5, mpnet4 or none, not minilm6" in r.stderr


def test_unpack_refuses_an_incomplete_student_and_writes_nothing(tmp_path):
    """b's total says 7 parts; the calls brought 5: unpack names the missing stage and stops
    before it moves models/ back or writes a checkpoint; without b's total it stops too."""
    b, s0 = tmp_path / "b", tmp_path / "s0"
    b.mkdir()
    s0.mkdir()
    (b / "student_parts_total.txt").write_text("7\n")
    for i in range(5):
        (s0 / f"student_f16.tar.part{i:02d}").write_bytes(b"x")
    before = (REPO / "checkpoints" / "gpu_student").exists()
    r = run_stage(["unpack", str(b), str(s0)], tmp_path / "g")
    assert r.returncode == 3
    assert "have 5 of 7 parts of student_f16: fetch the rest (stage s K)" in r.stderr
    assert (REPO / "checkpoints" / "gpu_student").exists() == before
    r = run_stage(["unpack", str(b)], tmp_path / "g")
    assert r.returncode == 3
    assert "have 0 of 7 parts of student_f16" in r.stderr
    r = run_stage(["unpack", str(s0)], tmp_path / "g")  # b's folder, with the total, not given
    assert r.returncode == 3
    assert f"no student_parts_total.txt in {s0}" in r.stderr
    assert (REPO / "checkpoints" / "gpu_student").exists() == before


def test_stage_l_returns_the_soft_label_parts_that_put_back_together_are_the_file(tmp_path):
    """b splits soft.npz into 15 MB parts in the work folder; ``l 0`` returns the first four with
    their total, and the parts concatenated in name order are the file again."""
    work = tmp_path / "g"
    work.mkdir()
    data = bytes(range(256)) * 100
    (work / "soft.npz").write_bytes(data)
    subprocess.run(["split", "-b", "7000", "-d", str(work / "soft.npz"), str(work / "soft.npz.part")], check=True)
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run(["bash", str(SCRIPT), "l", "0"], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "GPU_WORK": str(work), "OUT": str(out), "PY": "false"})
    assert r.returncode == 0, r.stderr
    assert (out / "soft_parts_total.txt").read_text().strip() == "4"
    parts = sorted(out.glob("soft.npz.part*"))
    assert [p.name for p in parts] == [f"soft.npz.part{i:02d}" for i in range(4)]
    assert b"".join(p.read_bytes() for p in parts) == data


def test_stage_l_before_b_says_so(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    r = subprocess.run(["bash", str(SCRIPT), "l", "0"], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", "GPU_WORK": str(tmp_path / "g"), "OUT": str(out)})
    assert r.returncode == 3
    assert "no soft-label parts" in r.stderr


def test_check_sizes_refuses_a_folder_that_would_not_fit_one_device_call(tmp_path):
    """prepare checks each folder it packed, with the working tree beside it, against one device
    call's 64 MiB before it moves models/ aside (check-sizes is that check alone)."""
    small, large = tmp_path / "small", tmp_path / "large"
    small.mkdir()
    large.mkdir()
    (small / "f").write_bytes(b"x" * 100)
    (large / "f").write_bytes(b"x" * 5000)

    def run(limit: int, *dirs: Path) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", str(SCRIPT), "check-sizes", *map(str, dirs)], capture_output=True,
                              text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "LIMIT_BYTES": str(limit)})

    ok = run(1 << 40, small, large, tmp_path / "absent")
    assert ok.returncode == 0 and "each fits one device call" in ok.stdout
    # the tracked tree (a few MB) counts too: a limit under it refuses even the small folder
    r = run(4000, small, large)
    assert r.returncode == 3
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"{small} with the working tree is ")
    assert lines[1].startswith(f"{large} with the working tree is ") and "STUDENT=none" in lines[1]
    tree = int(lines[0].split(" is ")[1].split()[0]) - 100
    assert tree > 1_000_000  # the repository's tracked files, models/ left out
    # between the two folders' totals: the small one passes, the large one is named
    r = run(tree + 1000, small, large)
    assert r.returncode == 3 and str(small) not in r.stderr and str(large) in r.stderr
