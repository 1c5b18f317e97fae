"""scripts/setup_env.sh: a finished install is recorded, and the same request again is not redone
(scripts/test.sh reruns without the package index); a change or SETUP_FORCE installs again."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("sha256sum") is None,
                                reason="needs bash and sha256sum")


@pytest.fixture()
def checkout(tmp_path):
    """The script and pyproject.toml in a folder whose .venv/bin/python logs its calls (and fails
    while FAIL_PIP exists)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup_env.sh", tmp_path / "scripts" / "setup_env.sh")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/usr/bin/env bash\necho "$*" >> {tmp_path}/calls\n[ ! -e {tmp_path}/FAIL_PIP ]\n')
    python.chmod(0o755)
    return tmp_path


def run(checkout: Path, profile: str, **env: str) -> tuple[int, list[str], str]:
    calls = checkout / "calls"
    calls.unlink(missing_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in ("SETUP_FORCE", "TORCH_INDEX_URL", "TORCH_VERSION")}
    p = subprocess.run(["bash", "scripts/setup_env.sh", profile], cwd=checkout, capture_output=True, text=True,
                       env={**base, "TORCH_INDEX_URL": "", **env}, timeout=60)
    return p.returncode, calls.read_text().splitlines() if calls.exists() else [], p.stderr


def test_a_finished_install_is_not_redone_until_something_it_depends_on_changes(checkout):
    rc, calls, _ = run(checkout, "serve")
    assert rc == 0 and calls == ["-m pip install -q --upgrade pip", "-m pip install -q -e ."]
    rc, calls, err = run(checkout, "serve")
    assert (rc, calls) == (0, [])
    assert "setup_env: .venv already holds the 'serve' install (SETUP_FORCE=1 installs again)" in err

    rc, calls, _ = run(checkout, "dev")  # another profile: its own install
    assert rc == 0 and "-m pip install -q torch==2.13.0" in calls and "-m pip install -q -e .[train,dev,itn,triton]" in calls
    assert run(checkout, "dev")[1] == []
    assert run(checkout, "dev", TORCH_VERSION="2.12.0")[1][1] == "-m pip install -q torch==2.12.0"
    assert run(checkout, "dev", SETUP_FORCE="1")[1][1] == "-m pip install -q torch==2.13.0"

    with open(checkout / "pyproject.toml", "a") as f:
        f.write("\n# a new dependency\n")
    assert run(checkout, "serve")[1] == ["-m pip install -q --upgrade pip", "-m pip install -q -e ."]


def test_a_failed_install_is_tried_again(checkout):
    assert run(checkout, "serve")[0] == 0
    (checkout / "FAIL_PIP").touch()
    rc, calls, _ = run(checkout, "serve", SETUP_FORCE="1")
    assert rc != 0 and calls == ["-m pip install -q --upgrade pip"]
    (checkout / "FAIL_PIP").unlink()
    rc, calls, _ = run(checkout, "serve")  # the failed run removed the record of the old install
    assert rc == 0 and calls == ["-m pip install -q --upgrade pip", "-m pip install -q -e ."]
