"""training.lockfile: a lock names its processes with their start times, and two processes
that find the same stale lock cannot both take it over."""

import os
import socket
import subprocess
import sys
import threading

import training.lockfile as lockfile
from training.lockfile import Held, holder, lock_text, start_time, take


def _gone_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_a_lock_names_each_process_with_its_start_time(tmp_path):
    lock = tmp_path / "x.lock"
    assert take(lock, [os.getpid()]) is None
    host, mark = lock.read_text().split()
    assert host == socket.gethostname()
    assert mark == f"{os.getpid()}@{start_time(os.getpid())}"
    assert take(lock, [os.getpid()]) == Held(host, (os.getpid(),))


def test_a_process_id_used_again_by_another_process_does_not_keep_a_lock(tmp_path):
    """The recorded process ended and its id now belongs to a process that started later (here:
    this one, recorded with another start time): the lock is stale and is taken over."""
    lock = tmp_path / "x.lock"
    lock.write_text(f"{socket.gethostname()} {os.getpid()}@{start_time(os.getpid()) - 1}")
    assert holder(lock) is None and not lock.exists()
    lock.write_text(f"{socket.gethostname()} {os.getpid()}")  # a bare id (no /proc when written): it runs
    assert holder(lock) == Held(socket.gethostname(), (os.getpid(),))
    lock.write_text(lock_text([os.getpid()]))
    assert holder(lock) == Held(socket.gethostname(), (os.getpid(),))


def test_two_takers_of_one_stale_lock_do_not_both_get_it(tmp_path, monkeypatch):
    """A finds the lock stale and, before it removes it, B tries too. Without the folder's lock B
    would remove the stale file, make its own, and A would then remove B's and make its own."""
    lock = tmp_path / "x.lock"
    lock.write_text(f"{socket.gethostname()} {_gone_pid()}")
    a_checking, b_done = threading.Event(), threading.Event()
    real_alive = lockfile.alive

    def slow_alive(pid, started=None):
        if threading.current_thread().name == "A":
            a_checking.set()
            b_done.wait(1.0)  # B blocks on the folder's flock until A is done: A waits this long
        return real_alive(pid, started)

    monkeypatch.setattr(lockfile, "alive", slow_alive)
    got = {}

    def run(name):
        got[name] = take(lock, [os.getpid()])
        if name == "B":
            b_done.set()

    a = threading.Thread(target=run, args=("A",), name="A")
    a.start()
    assert a_checking.wait(10)
    b = threading.Thread(target=run, args=("B",), name="B")
    b.start()
    a.join(10)
    b.join(10)
    assert sorted(got) == ["A", "B"]
    assert [name for name, held in sorted(got.items()) if held is None] == ["A"]
    assert got["B"] == Held(socket.gethostname(), (os.getpid(),))
