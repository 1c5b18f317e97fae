"""Lock files of the training pipeline: a label shard's (:mod:`training.distill`) and a recipe's
output folder (:mod:`training.recipe`).

A lock is a file created exclusively that reads ``HOST PID@START [PID@START ...]``: the host
and the processes that hold it, each with its start time (clock ticks after boot, from
``/proc``; a bare ``PID`` where that cannot be read), so that a process id used again by a later
process, after the holder ended or the host rebooted, does not keep the lock. It is taken over
once none of those processes runs any more (a stopped or killed run), and so is one that still
does not read :data:`UNREADABLE_LOCK_S` after it was made (a process stopped between creating
and writing it). A lock of another host cannot be checked from here: it holds.

Taking one is done under an exclusive ``flock`` of its folder, so that two processes that find
the same stale lock cannot both take it over (the second would remove the first's new lock).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterator, Sequence
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


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat``'s fields from the state on (the 3rd: its name, in parentheses, may hold
    spaces); None where it cannot be read (no such process, or no ``/proc``)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None


def start_time(pid: int) -> int | None:
    """When process ``pid`` of this host started (clock ticks after boot); None where it cannot be read."""
    fields = _stat_fields(pid)
    try:
        return int(fields[19]) if fields is not None else None
    except (ValueError, IndexError):
        return None


def alive(pid: int, started: int | None = None) -> bool:
    """Whether process ``pid`` of this host runs (a zombie, dead but not reaped, does not); with
    ``started``, only if it is the process that started then (not a later one given the same id)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's
    fields = _stat_fields(pid)
    if fields is None:
        return True  # no /proc: it answered the signal
    if fields[:1] == ["Z"]:
        return False
    return started is None or fields[19:20] == [str(started)]


def lock_text(pids: Sequence[int]) -> str:
    """What a lock held by ``pids`` of this host reads."""
    marks = []
    for pid in pids:
        started = start_time(pid)
        marks.append(str(pid) if started is None else f"{pid}@{started}")
    return " ".join([socket.gethostname(), *marks])


@contextlib.contextmanager
def _folder_locked(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` of ``folder`` while the block runs (none where the file system
    cannot lock a folder: then takeovers are as before, check then remove)."""
    try:
        import fcntl

        fd = os.open(folder, os.O_RDONLY)
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass
        yield
    finally:
        os.close(fd)  # releases the flock


def take(lock: Path, pids: Sequence[int]) -> Held | None:
    """Create ``lock`` for ``pids`` (this process first); None when taken, else who holds it.
    A stale lock (:func:`holder` finds none) is removed and the creation tried again, under the
    folder's ``flock``."""
    with _folder_locked(lock.parent):
        return _take(lock, pids)


def _take(lock: Path, pids: Sequence[int]) -> Held | None:
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
        marks = [(int(p), int(t) if t else None) for p, _, t in (r.partition("@") for r in recorded)]
        pids = [p for p, _ in marks]
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
    live = tuple(p for p, started in marks if alive(p, started))
    if live:
        return Held(host, live)
    log.info("taking over %s (its processes %s are gone)", lock, " ".join(map(str, pids)))
    lock.unlink(missing_ok=True)
    return None
