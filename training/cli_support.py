"""What every ``python -m training.X`` tool does around its work: log to stderr at INFO,
and turn the errors a user can fix into one line and exit code 2."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from streampunct.errors import InputError, StreampunctError


def run_tool(action: Callable[[], object]) -> int:
    """Run ``action`` with logging set up; 0 when it returns, 2 with ``error: ...`` on
    stderr when it raises a :class:`~streampunct.errors.StreampunctError` (InputError,
    ModelError, ...). Other exceptions are bugs and keep their traceback."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        action()
    except StreampunctError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def check_writable(path: str | Path, flag: str, *, folder: bool = False) -> Path:
    """``path`` made absolute, or an :class:`InputError` now, before the work, when the file
    (with ``folder``: the folder) cannot be written there: a file in the way, a folder where a
    file goes, a link to nothing on the way, no permission. Nothing is created. ``path`` is taken
    as the tools write it (a ``~`` the shell did not expand is a folder named ``~``)."""
    p = Path(path).absolute()
    if folder and p.exists() and not p.is_dir():
        raise InputError(f"{flag} {p} is a file, not a folder")
    if not folder and p.is_dir():
        raise InputError(f"{flag} {p} is a folder, not a file")
    near = p if folder else p.parent
    while not near.exists() and near != near.parent:  # the nearest part of the path that is there
        if near.is_symlink():  # making the folders would fail there (after the work)
            raise InputError(f"{flag} {p} cannot be written: {near} is a link to nothing ({os.readlink(near)})")
        near = near.parent
    if not near.is_dir():
        raise InputError(f"{flag} {p} cannot be written: {near} is a file")
    if not os.access(near, os.W_OK | os.X_OK):
        raise InputError(f"{flag} {p} cannot be written: no permission to write in {near}")
    return p
