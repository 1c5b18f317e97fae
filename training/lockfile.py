"""Lock files of the training pipeline: a label shard's (:mod:`training.distill`) and a recipe's
output folder (:mod:`training.recipe`).

A lock is a file created exclusively that reads ``HOST PID [PID ...]``: the host and the
processes that hold it. It is taken over once none of those processes runs any more (a stopped
or killed run), and so is one that still does not read :data:`UNREADABLE_LOCK_S` after it was
made (a process stopped between creating and writing it). A lock of another host cannot be
checked from here: it holds.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

log = logging.getLogger(__name__)

#: A lock file that does not read as "host pid ..." this long after it was made is left from a
#: process stopped between creating and writing it: it is taken over.
UNREADABLE_LOCK_S = 60.0


class Held(NamedTuple):
    """Who holds a lock this process could not take: ``host`` (None: the file does not read
    yet, being written by another process) and its processes (on this host, those that run)."""

    host: str | None
    pids: tuple[int, ...]


def alive(pid: int) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, dead but not reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: it answered the signal
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def lock_text(pids: Sequence[int]) -> str:
    """What a lock held by ``pids`` of this host reads."""
    return " ".join([socket.gethostname(), *map(str, pids)])


def take(lock: Path, pids: Sequence[int]) -> Held | None:
    """Create ``lock`` for ``pids`` (this process first); None when taken, else who holds it.
    A stale lock (:func:`holder` finds none) is removed and the creation tried again."""
    for _ in range(3):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            held = holder(lock)
            if held is not None:
                return held
            continue
        with os.fdopen(fd, "w") as f:
            f.write(lock_text(pids))
        return None
    return Held(None, ())  # made again each time it was removed: another process is taking it


def holder(lock: Path) -> Held | None:
    """Who holds ``lock``; None when nobody does (it is gone, or stale: then it is removed)."""
    try:
        host, *recorded = lock.read_text().split()
        pids = [int(p) for p in recorded]
    except (OSError, ValueError):  # being written, or left half-made (or gone meanwhile)
        try:
            fresh = time.time() - lock.stat().st_mtime < UNREADABLE_LOCK_S
        except OSError:
            return None
        if fresh:
            return Held(None, ())
        lock.unlink(missing_ok=True)
        return None
    if host != socket.gethostname():
        return Held(host, tuple(pids))
    live = tuple(p for p in pids if alive(p))
    if live:
        return Held(host, live)
    log.info("taking over %s (its processes %s are gone)", lock, " ".join(recorded))
    lock.unlink(missing_ok=True)
    return None
