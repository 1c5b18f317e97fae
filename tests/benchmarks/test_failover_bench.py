"""``bench failover``: the HAProxy template, the bookkeeping, and a small run through a real HAProxy."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from collections import Counter

import numpy as np
import pytest

from benchmarks.cli import add_arguments
from benchmarks.failover_bench import (
    FailoverConfig,
    StreamRecord,
    caption_gaps,
    config_from_args,
    ok,
    render_haproxy_config,
    replica_spec,
    run_failover_bench,
    summarize,
)
from benchmarks.load_clients import SessionOutcome, SessionPlan

HAPROXY = shutil.which("haproxy")
needs_haproxy = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)")


def test_the_template_renders_one_server_line_per_replica_and_the_contract(tmp_path):
    text = render_haproxy_config([8801, 8802, 8803], "127.0.0.1:9000", tmp_path / "s.sock")
    servers = [line.split() for line in text.splitlines() if line.strip().startswith("server ")]
    assert servers == [["server", f"r{k}", f"127.0.0.1:{8800 + k}"] for k in (1, 2, 3)]
    assert "${" not in text and "bind 127.0.0.1:9000" in text
    for directive in ("balance leastconn", "http-check send meth GET uri /healthz", "http-check expect status 200",
                      "timeout tunnel 1h", "timeout check 2s", "retry-on conn-failure empty-response response-timeout 503",
                      f"stats socket {tmp_path / 's.sock'}"):
        assert directive in text


@needs_haproxy
def test_haproxy_accepts_the_rendered_configuration(tmp_path):
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(render_haproxy_config([8801, 8802], "127.0.0.1:9000", tmp_path / "s.sock"))
    check = subprocess.run([HAPROXY, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


def test_bad_schedules_are_refused_with_what_to_pass():
    with pytest.raises(ValueError, match="with 2 replicas pass --restart-killed"):
        FailoverConfig(replicas=2)
    with pytest.raises(ValueError, match="0 < --kill-at-s < --term-at-s < --duration-s"):
        FailoverConfig(kill_at_s=30.0, term_at_s=20.0)
    with pytest.raises(ValueError, match="at least 2 replicas"):
        FailoverConfig(replicas=1)


def test_the_cli_builds_the_config():
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["failover", "--replicas", "2", "--restart-killed", "--sessions", "5", "--engine", "fake",
                         "--duration-s", "9", "--kill-at-s", "2", "--term-at-s", "4", "--drain", "finalize"])
    cfg = config_from_args(args)
    assert (cfg.replicas, cfg.sessions, cfg.engine, cfg.restart_killed, cfg.drain) == (2, 5, "fake", True, "finalize")
    assert (cfg.duration_s, cfg.kill_at_s, cfg.term_at_s) == (9.0, 2.0, 4.0)


@pytest.mark.parametrize(("replicas", "engine_workers"), [(3, 1), (2, 1), (2, 2)])
def test_replicas_on_one_host_share_its_cores_once(monkeypatch, replicas, engine_workers):
    """Each replica's engines get cores / (replicas x engine workers) intra-op threads, at least
    one: with --engine-workers 1 alone, each would take every core of the host."""
    monkeypatch.setattr("benchmarks.failover_bench.physical_cores", lambda: 4)
    cfg = FailoverConfig(replicas=replicas, engine_workers=engine_workers, restart_killed=True)
    argv = replica_spec(cfg).argv(8801)
    threads = max(1, 4 // (replicas * engine_workers))
    assert argv[argv.index("--engine-option") + 1] == f"intra_op_threads={threads}"
    assert argv[argv.index("--engine-workers") + 1] == str(engine_workers)
    fake = replica_spec(FailoverConfig(replicas=replicas, engine="fake", restart_killed=True)).argv(8801)
    assert "--engine-option" not in fake  # the fake engine has no threads option


def _record(words, finals, prefill=0):
    plan = SessionPlan(tuple(words), ((0.0, 0, len(words)),), prefill)
    out = SessionOutcome(plan, np.zeros(len(words)), end_at=0.0, finals=finals, errors=Counter(),
                         ended_words=len(words))
    return StreamRecord(out)


def test_summary_counts_lost_and_duplicated_words_and_phases_by_the_clock():
    events = {"t0": 0.0, "kill_at": 10.0, "term_at": 20.0}
    good = _record(["a", "b", "c", "d"], [(1.0, 0, ["a", "b"]), (15.0, 2, ["c"]), (30.0, 3, ["d"])])
    bad = _record(["a", "b", "c", "d"], [(1.0, 0, ["a", "b"]), (2.0, 1, ["b", "c"])])
    cfg = FailoverConfig(right_context=0, max_delay_ms=0)
    result = summarize(cfg, [good, bad], events)
    assert (result["words_lost"], result["words_duplicated"], result["words_finalized"]) == (1, 1, 7)
    assert not ok(result)
    # good: a, b final before the kill; c during; d decidable (sent at 0) before the recovery: during
    assert result["margin_ms"]["before"]["words"] == 2 + 3 and result["margin_ms"]["during"]["words"] == 2
    assert result["margin_ms"]["after"]["words"] == 0
    # gaps: 1 -> 15 spans the kill (during), 15 -> 30 began before the recovery at 20 (during)
    assert caption_gaps(good) == [(1.0, 15.0), (15.0, 30.0)]
    assert result["caption_gap_ms"]["during"] == {"gaps": 2, "p95": pytest.approx(14950.0), "max": 15000.0}
    assert result["longest_caption_gap_ms"] == 15000.0
    assert ok(summarize(cfg, [good], events))


def test_caption_gaps_leave_out_the_prefill_final():
    record = _record(["a", "b", "c", "d"], [(0.1, 0, ["a", "b"]), (3.0, 2, ["c"]), (3.5, 3, ["d"])], prefill=2)
    assert caption_gaps(record) == [(3.0, 3.5)]


@needs_haproxy
def test_a_killed_and_a_drained_replica_lose_and_repeat_no_word(tmp_path):
    cfg = FailoverConfig(replicas=2, restart_killed=True, sessions=4, engine="fake", duration_s=7.0,
                         kill_at_s=2.5, term_at_s=4.5, stagger_s=1.0, prefill_words=8,
                         out_dir=tmp_path, name="fo")
    result = run_failover_bench(cfg, command="test", workdir=tmp_path / "run")
    assert result["ok"], result
    assert (result["words_lost"], result["words_duplicated"], result["sessions_failed"]) == (0, 0, 0)
    assert result["words_finalized"] == result["words_sent"] > 0
    # every session sat on the killed replica or on the drained one: each lost its connection
    assert result["sessions_interrupted"] == result["sessions_resumed"] == 4
    codes = result["interruptions_by_close_code"]
    assert codes["1006"] >= 1 and codes["1012"] >= 1 and sum(codes.values()) == result["interruptions"]
    assert sum(result["events"]["haproxy_sessions_before_kill"].values()) == 4
    assert result["events"]["term_exit"]["code"] == 0 and result["balancer_healthz_after"] == 200
    assert json.loads((tmp_path / "fo.json").read_text())["words_lost"] == 0
    assert (tmp_path / "run" / "haproxy.cfg").is_file()


def start_hold(*extra: str) -> subprocess.Popen:
    """``failover_bench --hold`` with two fake replicas (and ``extra``), its output piped."""
    import os
    import sys

    from benchmarks.common import REPO

    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "benchmarks.failover_bench", "--hold", "--engine", "fake",
                             "--replicas", "2", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=REPO, env=env)


def read_until_ready(proc: subprocess.Popen) -> list[str]:
    """The lines ``--hold`` printed up to its ``balancer: URL`` line."""
    lines: list[str] = []
    while not (lines and lines[-1].startswith("balancer: ")):
        line = proc.stdout.readline()
        assert line, "the launcher exited before it was ready:\n" + "".join(lines)
        lines.append(line)
    return lines


@needs_haproxy
def test_hold_serves_streams_through_the_balancer_until_interrupted(tmp_path):
    import asyncio
    import os
    import signal

    from streampunct.client.stream_client import StreamClient
    from streampunct.core.wire import Ended, Final

    proc = start_hold()
    try:
        lines = read_until_ready(proc)
        url = lines[-1].split()[1]
        pids = [int(line.rsplit("pid ", 1)[1].rstrip(")\n")) for line in lines if line.startswith("replica r")]
        assert len(pids) == 2

        async def stream() -> list[str]:
            async with await StreamClient.connect(url) as client:
                await client.send_words(["hello", "there", "how", "are", "you"])
                await client.end()
                words = []
                async for message in client:
                    if isinstance(message, Final):
                        words += [w.w for w in message.words]
                    if isinstance(message, Ended):
                        break
                return words

        assert asyncio.run(stream()) == ["hello", "there", "how", "are", "you"]
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0
        for pid in pids:  # the replicas were stopped and reaped with it
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_balancer_that_fails_to_start_takes_the_replicas_down_with_it(tmp_path):
    from benchmarks.failover_bench import Replicas, ReplicaSpec

    replicas = Replicas(ReplicaSpec(engine="fake"), 2, tmp_path, haproxy=shutil.which("false") or "/bin/false")
    with pytest.raises(RuntimeError, match="haproxy exited"):
        with replicas:
            pass
    assert len(replicas.servers) == 2 and not any(s.alive for s in replicas.servers)
    assert all(s.proc.returncode is not None for s in replicas.servers)


@needs_haproxy
def test_a_handshake_refused_with_503_is_retried_on_another_replica(tmp_path):
    """A draining replica passes its health check until the next one, and answers handshakes 503
    meanwhile: the template's retry-on sends them to another replica, so no client sees it."""
    import asyncio
    import http.server
    import threading

    from benchmarks.failover_bench import Replicas, ReplicaSpec
    from streampunct.client.stream_client import open_client

    refused = []

    class Draining(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (the http.server API)
            status = 200 if self.path == "/healthz" else 503
            if status == 503:
                refused.append(self.path)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    stub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Draining)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    try:
        with Replicas(ReplicaSpec(engine="fake"), 1, tmp_path, haproxy=HAPROXY,
                      extra_ports=[stub.server_address[1]]) as replicas:

            async def connect_all(n: int) -> int:
                for _ in range(n):
                    client = await open_client(replicas.url)
                    await client.close()
                return n

            assert asyncio.run(connect_all(12)) == 12
    finally:
        stub.shutdown()
        stub.server_close()
    assert refused and set(refused) == {"/v1/stream"}  # leastconn did send handshakes to it


def test_the_summary_says_out_of_order_words_close_codes_and_resume_times():
    from benchmarks.failover_bench import summary_text

    margins = {phase: {"p95": 20.0} for phase in ("before", "during", "after")}
    text = summary_text({
        "sessions": 6, "words_sent": 900, "words_lost": 0, "words_duplicated": 0, "words_out_of_order": 0,
        "sessions_interrupted": 4, "interruptions_by_close_code": {"1006": 2, "1012": 2}, "sessions_resumed": 4,
        "resume_ms": {"p50": 91.2, "max": 101.6}, "sessions_failed": 0, "longest_caption_gap_ms": 300.0,
        "margin_ms": margins})
    assert "0 out of order" in text and "(close codes 1006: 2, 1012: 2)" in text
    assert "4 resumed (p50 91.2 / max 101.6 ms)" in text


@needs_haproxy
def test_a_bench_killed_outright_takes_haproxy_down_with_it(tmp_path):
    """SIGKILL of the bench (no handler, no ``finally``): HAProxy, like the replicas, stops by
    itself (``streampunct.commands.children.dies_with_parent``) rather than holding the balancer's port."""
    import signal
    import time

    import psutil


    proc = start_hold("--haproxy", HAPROXY)
    children: list[psutil.Process] = []

    def gone(p: psutil.Process) -> bool:
        try:
            return p.status() == psutil.STATUS_ZOMBIE  # exited; its new parent may not reap it
        except psutil.NoSuchProcess:
            return True

    try:
        read_until_ready(proc)
        children = psutil.Process(proc.pid).children()
        proxies = [p for p in children if p.name() == "haproxy"]
        assert len(proxies) == 1 and len(children) == 3
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline and not all(gone(p) for p in children):
            time.sleep(0.1)
        assert gone(proxies[0]), "haproxy outlived the bench that started it"
        assert all(gone(p) for p in children)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        for p in children:  # what this test started, should it have outlived the bench
            if not gone(p):
                p.kill()


def test_the_summary_shows_a_missing_figure_as_a_dash_not_none():
    """A phase in which no word was finalized (a run that stopped early, a kill before any final)
    and a run without resumes have no figure: the line says so instead of printing ``None``."""
    from benchmarks.failover_bench import summary_text

    margins = {"before": {"p95": None}, "during": {"p95": 35.5}, "after": {"p95": None}}
    text = summary_text({
        "sessions": 2, "words_sent": 10, "words_lost": 10, "words_duplicated": 0, "words_out_of_order": 0,
        "sessions_interrupted": 0, "interruptions_by_close_code": {}, "sessions_resumed": 0,
        "resume_ms": {"p50": None, "max": None}, "sessions_failed": 0, "longest_caption_gap_ms": None,
        "margin_ms": margins})
    assert "None" not in text
    assert "p95 margin before - / during 35.5 / after - ms (-: no word finalized then)" in text
    assert "0 resumed (p50 - / max - ms)" in text and "longest caption gap - ms" in text


def _plain_file(folder):
    path = folder / "haproxy"
    path.write_text("")  # mode 0644
    return path


@pytest.mark.parametrize(("make", "why"), [
    (lambda tmp: tmp / "nonexistent", "does not exist"),
    (lambda tmp: tmp, "is a folder"),
    (_plain_file, "is not executable"),
])
def test_a_haproxy_path_given_that_cannot_run_says_why_not_path(make, why, tmp_path):
    """``--haproxy PATH`` names one file: "not on PATH" would send the user looking at $PATH."""
    from benchmarks.failover_bench import require_haproxy
    from streampunct.errors import InputError

    path = str(make(tmp_path))
    with pytest.raises(InputError) as e:
        require_haproxy(path)
    assert str(e.value) == f"--haproxy {path}: {why}"
    with pytest.raises(InputError, match=r"no 'no-such-haproxy' on PATH: install HAProxy"):
        require_haproxy("no-such-haproxy")


def test_the_bench_names_the_haproxy_path_it_cannot_run_before_any_replica(tmp_path, capsys):
    from streampunct.cli import main

    code = main(["bench", "failover", "--engine", "fake", "--haproxy", str(tmp_path / "nonexistent"),
                 "--out-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code != 0 and f"--haproxy {tmp_path / 'nonexistent'}: does not exist" in err
    assert "PATH" not in err


@needs_haproxy
def test_a_stream_on_a_frozen_replica_resumes_elsewhere_once_the_checks_mark_it_down(tmp_path):
    """A replica that stops answering but keeps its sockets open (SIGSTOP here; a hung event loop,
    a frozen VM or a host cut off alike) sends no close and no reset, and clients set no ping
    timeout: HAProxy's checks mark it down within seconds, and the template's
    ``on-marked-down shutdown-sessions`` then cuts its tunnels, so the stream resumes on the other
    replica. Without it the stream waited for the frozen replica (``timeout tunnel``: an hour)."""
    import asyncio
    import os
    import signal

    from benchmarks.failover_bench import Replicas, ReplicaSpec
    from streampunct.client.stream_client import ResumableStream
    from streampunct.core.wire import Ended, Final

    words = [f"w{i}" for i in range(40)]
    frozen: list[int] = []
    with Replicas(ReplicaSpec(engine="fake"), 2, tmp_path, haproxy=HAPROXY) as replicas:

        async def run() -> tuple[list[str], int, int]:
            finals: list[str] = []
            stream = await ResumableStream.connect(replicas.url, right_context=1)
            async with stream:
                await stream.send_words(words[:20])
                await stream.flush()
                messages = aiter(stream)
                while len(finals) < 20:
                    message = await asyncio.wait_for(anext(messages), 10)
                    if isinstance(message, Final):
                        finals += [w.w for w in message.words]
                holder = [name for name, row in replicas.stats().items() if row["scur"] == "1"]
                assert len(holder) == 1, replicas.stats()
                k = int(holder[0][1:]) - 1
                frozen.append(replicas.servers[k].proc.pid)
                os.kill(frozen[0], signal.SIGSTOP)
                await stream.send_words(words[20:])
                await stream.end()
                # the checks take at most about 5 s (2 checks of 500 ms + 2 s timeout each)
                while not isinstance(message := await asyncio.wait_for(anext(messages), 20), Ended):
                    if isinstance(message, Final):
                        finals += [w.w for w in message.words]
                return finals, message.words, len(stream.notices)

        try:
            finals, ended, notices = asyncio.run(run())
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
    assert finals == words and ended == 40 and notices == 1
