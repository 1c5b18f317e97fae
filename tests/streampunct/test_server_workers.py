"""``streampunct serve --workers N``: N server processes on one port under a supervisor.

The tests start the real command (``--engine fake``, port 0) in a child process and tell the
workers apart by what each answer names: ``/healthz``'s ``worker`` and the
``X-Streampunct-Worker`` header of every response, the 101 of a stream included. The kernel
spreads connections over the workers by a hash of their addresses, so a test that needs a
given worker opens connections until one lands there.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
from pathlib import Path

import numpy as np
import pytest
from websockets.exceptions import InvalidStatus

from engines.fake import fake_labels
from streampunct.client.stream_client import StreamClient, Transcript
from streampunct.core.wire import (
    ConfigRequest,
    Ended,
    Error,
    Final,
    PunctuatedWord,
    Resumed,
    ResumeRequest,
)
from streampunct.server.app import WORKER_HEADER
from tests.streampunct.fakes import ended, until

REPO = Path(__file__).resolve().parents[2]
_ANNOUNCE = re.compile(r"serving (\S+) with (\S+) on (ws://\S+)")  # benchmarks/server_under_test.py's
#: Connections a test opens, at most, to find a given worker (each lands on one at random).
TRIES = 60
WORDS = "so we went to the market and bought apples pears and a very large melon today".split()


class Server:
    """``serve --workers N --engine fake --port 0`` in a child process; its log in a file."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc = proc
        self.log = log
        self.url = ""
        self.pids: set[int] = set()  # the workers seen

    @property
    def http(self) -> str:
        return self.url.replace("ws://", "http://").removesuffix("/v1/stream")

    async def ready_line(self) -> str:
        line = (await asyncio.wait_for(self.proc.stdout.readline(), 90)).decode()
        match = _ANNOUNCE.search(line)
        assert match, line + self.log.read_text()
        self.url = match.group(3)
        return line

    async def get(self, path: str) -> tuple[int, dict[str, str], str]:
        """(status, headers with lowercase names, body) of a plain GET, on a connection of its own."""
        host, _, port = self.http.removeprefix("http://").rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
            await writer.drain()
            raw = await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
        return int(status_line.split()[1]), headers, body.decode()

    async def health(self) -> dict:
        status, headers, body = await self.get("/healthz")
        health = json.loads(body)
        assert headers[WORKER_HEADER.lower()] == str(health["worker"])
        self.pids.add(health["pid"])
        return health

    async def workers_by_health(self, n: int) -> dict[int, dict]:
        """``/healthz`` of each of the ``n`` workers (worker -> answer)."""
        seen: dict[int, dict] = {}
        for _ in range(TRIES):
            health = await self.health()
            seen[health["worker"]] = health
            if len(seen) == n:
                return seen
        raise AssertionError(f"only workers {sorted(seen)} answered in {TRIES} tries")

    async def stream_on(self, worker: int, **options) -> StreamClient:
        """A session on ``worker`` (sessions that land elsewhere are closed at once)."""
        for _ in range(TRIES):
            client = await StreamClient.connect(self.url, **options)
            if worker_of(client) == worker:
                return client
            await client.close()
        raise AssertionError(f"no session landed on worker {worker} in {TRIES} tries")

    def kill(self) -> None:
        """SIGKILL the supervisor, if still there, and its workers (its children, no other process)."""
        if self.proc.returncode is not None:
            return  # its workers, if any are left, drain and exit by themselves
        for pid in [*_children(self.proc.pid), self.proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux's /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def _default_stop_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def worker_of(client: StreamClient) -> int:
    return int(client.connection.response.headers[WORKER_HEADER])


@contextlib.asynccontextmanager
async def serving(tmp_path: Path, *args: str, workers: int = 2, env: dict[str, str] | None = None):
    log = tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "streampunct.cli", "serve", "--engine", "fake", "--port", "0",
            "--workers", str(workers), "--engine-option", "batch_ms=1", *args,
            stdout=asyncio.subprocess.PIPE, stderr=out, cwd=REPO, env={**os.environ, **(env or {})},
            preexec_fn=_default_stop_signals,  # not the SIG_IGN of a background (nohup) test run
        )
    server = Server(proc, log)
    try:
        yield server
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                pass
        server.kill()  # what is still there after a failure
        await proc.wait()
        # The workers share the supervisor's stdout: its pipe closes once they are gone too (workers
        # left by a killed supervisor drain first), and only then may the loop close.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.stdout.read(), 30)


def expected_labels(aligner, words: list[str]) -> list[int]:
    return [int(fake_labels(np.asarray(aligner.word_ids(w)))[-1]) for w in words]


async def test_every_worker_serves_and_metrics_cover_them_all(tmp_path, aligner):
    """Two workers answer on the one port: each its own /healthz, each its own streams (with the
    labels of one process), and /metrics, whichever worker answers, counts the streams of both."""
    async with serving(tmp_path) as server:
        line = await server.ready_line()
        assert "(2 workers; Ctrl-C to stop)" in line and line.count("serving") == 1
        health = await server.workers_by_health(2)
        assert {h["workers"] for h in health.values()} == {2}
        assert len({h["pid"] for h in health.values()}) == 2 and server.proc.pid not in server.pids
        assert all(h["status"] == "ok" and h["engine"] == "fake" for h in health.values())

        for worker in (0, 1):
            async with await server.stream_on(worker, right_context=2, max_delay_ms=600_000) as client:
                for chunk in (WORDS[:6], WORDS[6:]):
                    await client.send_words(chunk)
                await client.end()
                transcript = await read_to_close(client, 30)
            assert transcript.words == WORDS and transcript.errors == []
            assert transcript.labels == ended(expected_labels(aligner, WORDS))

        from streampunct.server.workers import _remove_orphaned_metrics_dirs

        _remove_orphaned_metrics_dirs()  # another supervisor starting: this one's folder is held
        answered: set[str] = set()
        for _ in range(TRIES):  # both workers' answers to /metrics say the same
            status, headers, text = await server.get("/metrics")
            assert status == 200
            answered.add(headers[WORKER_HEADER.lower()])
            assert 'streampunct_worker_info{worker="0"} 1.0' in text
            assert 'streampunct_worker_info{worker="1"} 1.0' in text
            assert f"streampunct_words_in_total {2.0 * len(WORDS)}" in text
            assert f"streampunct_words_finalized_total {2.0 * len(WORDS)}" in text
            if len(answered) == 2:
                break
        assert answered == {"0", "1"}
        opened = float(re.search(r"^streampunct_sessions_opened_total (\S+)$", text, re.M).group(1))
        assert opened >= 2  # the two streams, and those that landed elsewhere on the way

        server.proc.terminate()
        assert await asyncio.wait_for(server.proc.wait(), 30) == 0


async def test_sigterm_drains_every_worker(tmp_path, aligner):
    """SIGTERM to the supervisor: each worker finalizes its open sessions (finals, flushed, 1001),
    and every process exits 0."""
    async with serving(tmp_path) as server:
        await server.ready_line()
        await server.workers_by_health(2)
        clients = [await server.stream_on(w, right_context=100, max_delay_ms=600_000) for w in (0, 1)]
        for client in clients:
            await client.send_words(WORDS)
            await client.send_raw('{"type": "barrier"}')  # answered (an error) once the words are fed
            assert isinstance(await client.recv(timeout=10), Error)
        server.proc.send_signal(signal.SIGTERM)
        for client in clients:
            transcript = Transcript()
            async with asyncio.timeout(20):
                async for message in client:
                    transcript.apply(message)
            assert transcript.words == WORDS  # every word final, though 100 words of right context never came
            assert transcript.labels == expected_labels(aligner, WORDS)
            assert client.close_code == 1001
        assert await asyncio.wait_for(server.proc.wait(), 30) == 0
        assert (await server.proc.stdout.read()) == b""  # the one ready line, nothing more
        log = server.log.read_text()
        assert "worker 0 (pid" in log and log.count(") exited\n") == 2
        for pid in server.pids:  # the workers are gone
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)


async def test_a_stream_resumes_on_another_worker_with_the_same_token(tmp_path):
    """Resume is the client's: a stream cut on one worker goes on on the other, which never saw it;
    the auth token (given once, through the environment) holds in both."""
    token = "s3cret"
    async with serving(tmp_path, env={"STREAMPUNCT_AUTH_TOKEN": token}) as server:
        await server.ready_line()
        refused: set[str] = set()
        for _ in range(TRIES):  # no token: 401 from each worker
            with pytest.raises(InvalidStatus) as exc:
                await StreamClient.connect(server.url)
            assert exc.value.response.status_code == 401
            refused.add(exc.value.response.headers[WORKER_HEADER])
            if len(refused) == 2:
                break
        assert refused == {"0", "1"}

        first = await StreamClient.connect(server.url, token=token, right_context=2, max_delay_ms=600_000)
        k = 8  # words 0..k are final once k+2 arrived
        await first.send_words(WORDS[: k + 3])
        got = []
        async with asyncio.timeout(10):
            while len(got) < k + 1:
                message = await first.recv()
                if isinstance(message, Final):
                    got.extend(message.words)
        first.connection.transport.abort()

        other = 1 - worker_of(first)
        second = await server.stream_on(other, token=token)
        context = tuple(PunctuatedWord(w.w, w.p) for w in got[-first.ready.limits.max_context_words:])
        await second.send(ResumeRequest(len(got), context, ConfigRequest(2, 600_000)))
        resumed = await second.recv(timeout=10)
        assert isinstance(resumed, Resumed) and resumed.start == len(got)
        await second.send_words(WORDS[len(got):])
        await second.end()
        after = [m async for m in second]
        finals = [m for m in after if isinstance(m, Final)]
        assert finals[0].start == len(got)
        assert [w.w for w in got] + [w.w for f in finals for w in f.words] == WORDS  # each word once
        assert after[-1] == Ended(len(WORDS)) and second.close_code == 1000


async def test_max_sessions_is_split_between_the_workers(tmp_path):
    """--max-sessions 3 with 2 workers: each takes ceil(3 / 2) = 2 sessions, then answers 503."""
    async with serving(tmp_path, "--max-sessions", "3") as server:
        await server.ready_line()
        open_: list[StreamClient] = []
        full: dict[str, str] = {}
        try:
            for _ in range(TRIES):
                try:
                    open_.append(await StreamClient.connect(server.url))
                except InvalidStatus as e:
                    assert e.response.status_code == 503
                    full[e.response.headers[WORKER_HEADER]] = e.response.body.decode()
                    if len(full) == 2:
                        break
            assert full == {"0": "session limit reached (2 on this worker of 2)\n",
                            "1": "session limit reached (2 on this worker of 2)\n"}
            assert sorted(worker_of(c) for c in open_) == [0, 0, 1, 1]
        finally:
            for client in open_:
                await client.close()


async def pending_stream(server, worker: int) -> StreamClient:
    """A stream on ``worker`` holding WORDS undecided (no right context yet), checked to be
    open: an unknown message type answers with an error and leaves the session running."""
    client = await server.stream_on(worker, right_context=100, max_delay_ms=600_000)
    await client.send_words(WORDS)
    await client.send_raw('{"type": "barrier"}')
    assert isinstance(await client.recv(timeout=10), Error)
    return client


async def read_to_close(client: StreamClient, timeout: float = 20) -> Transcript:
    transcript = Transcript()
    async with asyncio.timeout(timeout):
        async for message in client:
            transcript.apply(message)
    return transcript


@pytest.mark.parametrize("how", ["dies", "hangs"])
async def test_a_worker_that_dies_or_hangs_is_gone_and_the_others_drain_and_exit_1(tmp_path, how):
    # A stopped process stands for a loop blocked in a call that never returns: no heartbeat.
    args = ("--worker-hang-timeout-s", "2") if how == "hangs" else ()
    async with serving(tmp_path, *args) as server:
        await server.ready_line()
        health = await server.workers_by_health(2)
        pid = health[0]["pid"]
        # each worker leads a process group, which goes with it (its ITN pool's processes)
        assert os.getpgid(pid) == pid and os.getpgid(health[1]["pid"]) == health[1]["pid"]
        client = await pending_stream(server, 1)
        os.kill(pid, signal.SIGKILL if how == "dies" else signal.SIGSTOP)
        transcript = await read_to_close(client)
        assert transcript.words == WORDS and client.close_code == 1001  # the survivor drained
        assert await asyncio.wait_for(server.proc.wait(), 30) == 1
        log = server.log.read_text()
        if how == "dies":
            assert f"worker 0 (pid {pid}) exited unexpectedly (signal SIGKILL); draining the others" in log, log
        else:
            assert re.search(rf"worker 0 \(pid {pid}\) has not answered for \d+s "
                             r"\(worker_hang_timeout_s 2\); killing it", log), log
            assert f"worker 0 (pid {pid}) was killed for not answering; draining the others" in log, log
        assert not _running(pid)


async def test_workers_that_answer_are_not_taken_for_hung(tmp_path):
    # Heartbeats every 0.25 s: nothing is killed while more than two timeouts pass, streams open.
    async with serving(tmp_path, "--worker-hang-timeout-s", "1.5") as server:
        await server.ready_line()
        await server.workers_by_health(2)
        clients = [await pending_stream(server, worker) for worker in (0, 1)]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.shield(server.proc.wait()), 4)
        for client in clients:
            await client.send_raw('{"type": "barrier"}')
            assert isinstance(await client.recv(timeout=10), Error)
        assert "killing it" not in server.log.read_text()


async def test_a_worker_that_cannot_start_fails_the_command_in_one_line(tmp_path):
    async with serving(tmp_path, "--engine", "onnxruntime", "--model", str(tmp_path / "none")) as server:
        assert await asyncio.wait_for(server.proc.wait(), 90) == 2
        log = server.log.read_text()
        last = log.strip().splitlines()[-1]
        assert last.startswith("streampunct serve: error: ") and "none" in last, last
        # a worker that failed is said to have failed (once), and no worker's exit is taken for a fault
        assert "failed to start" in log and "ERROR" not in log, log


def test_a_taken_port_is_refused_and_port_0_is_held(tmp_path):
    from streampunct.errors import InputError
    from streampunct.server.workers import reserve_port

    held, port = reserve_port("127.0.0.1", 0)
    try:
        assert port > 0
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))  # held: a plain bind fails
    finally:
        for sock in held:
            sock.close()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        with pytest.raises(InputError, match=f"cannot listen on 127.0.0.1:{listening.getsockname()[1]}: "):
            reserve_port("127.0.0.1", listening.getsockname()[1])


def _server_socket(*, reuse_port: bool) -> socket.socket:
    """A socket as asyncio's ``create_server`` makes one (``SO_REUSEADDR``, and ``SO_REUSEPORT``
    for a worker)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return sock


def test_a_port_a_starting_supervisor_holds_is_refused_to_another():
    """Two ``serve --workers`` started together on one port: the second is refused while the
    first one's workers start, not joined to the port's ``SO_REUSEPORT`` group."""
    from streampunct.errors import InputError
    from streampunct.server.workers import reserve_port

    held, port = reserve_port("127.0.0.1", 0)
    try:
        with pytest.raises(InputError, match=f"cannot listen on 127.0.0.1:{port}: "):
            reserve_port("127.0.0.1", port)
        with _server_socket(reuse_port=False) as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))  # nor does a single server bind it
        with _server_socket(reuse_port=True) as worker:  # the workers do
            worker.bind(("127.0.0.1", port))
            worker.listen()
    finally:
        for sock in held:
            sock.close()


def test_a_port_with_time_wait_connections_of_a_plain_server_is_held():
    """A restart: the last server (without ``SO_REUSEPORT``) left TIME_WAIT connections."""
    from streampunct.server.workers import reserve_port

    with _server_socket(reuse_port=False) as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listening.accept()
        accepted.close()  # the server's side closes first: its connection stays in TIME_WAIT
        assert client.recv(1) == b""
        client.close()
    held, got = reserve_port("127.0.0.1", port)
    for sock in held:
        sock.close()
    assert got == port


MASK_PROBE = """
import sys
from streampunct.server import workers

def probe(spec, conn, *rest):  # worker_main's arguments
    status = open("/proc/self/status").read()
    conn.send(int(status.split("SigBlk:")[1].split()[0], 16))
    conn.close()

if __name__ == "__main__":
    from streampunct.server.app import ServerConfig
    workers.worker_main = probe
    supervisor = workers._Supervisor(ServerConfig(), 2, 0, None)
    supervisor.start()
    masks = [conn.recv() for conn in supervisor.conns]
    for proc in supervisor.procs:
        proc.join()
    print(" ".join(map(str, masks)))
"""


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the signal mask from /proc")
def test_workers_start_with_the_stop_signals_blocked(tmp_path):
    """Each worker starts with SIGINT and SIGTERM blocked, the first one included (whose spawn
    starts multiprocessing's resource tracker), so a Ctrl-C during its imports waits for its
    handler: no KeyboardInterrupt traceback, no worker killed before it can drain."""
    import subprocess

    script = tmp_path / "mask_probe.py"
    script.write_text(MASK_PROBE)
    got = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert got.returncode == 0, got.stderr
    masks = [int(m) for m in got.stdout.split()]
    assert len(masks) == 2
    for mask in masks:
        for sig in (signal.SIGINT, signal.SIGTERM):
            assert mask & (1 << (sig - 1)), f"{sig.name} not blocked: {mask:x}"


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_a_bad_workers_value_is_a_one_line_usage_error(value, capsys):
    from streampunct.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["serve", "--workers", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("streampunct serve: error: argument --workers: ")


def test_workers_split_the_sessions_and_the_cores(monkeypatch):
    from streampunct.cli import build_parser
    from streampunct.commands.serve import build_config
    from streampunct.server.workers import sessions_per_worker, worker_config

    monkeypatch.setattr("engines.ort_engine.physical_cores", lambda: 8)
    parser = build_parser()
    one = build_config(parser.parse_args(["serve"]))
    assert (one.workers, one.worker, one.batching.engine_workers) == (1, 0, 8)
    four = build_config(parser.parse_args(["serve", "--workers", "4", "--max-sessions", "10"]))
    assert (four.workers, four.batching.engine_workers) == (4, 2)  # auto: a worker's 8 / 4 cores
    assert [sessions_per_worker(n, 4) for n in (1, 4, 10, 256)] == [1, 1, 3, 64]
    third = worker_config(four, 2, 4, 4321)
    assert (third.worker, third.workers, third.port, third.max_sessions) == (2, 4, 4321, 3)
    assert third.auth_token == four.auth_token and third.drain == four.drain


def test_workers_are_capped_at_four_per_usable_core(monkeypatch):
    """Each worker is a process with its own engines: a typo such as --workers 400 is refused
    before anything forks, with the host's limit."""
    from streampunct.cli import build_parser
    from streampunct.commands.serve import build_config
    from streampunct.errors import InputError

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    parser = build_parser()
    assert build_config(parser.parse_args(["serve", "--workers", "8"])).workers == 8
    with pytest.raises(InputError, match=r"^--workers 9: at most 8 on this host \(4 per usable core\)"):
        build_config(parser.parse_args(["serve", "--workers", "9"]))
    # so are engines: --engine-workers 1000 loaded engines (23 MB each) until memory ran out
    assert build_config(parser.parse_args(["serve", "--engine-workers", "8"])).batching.engine_workers == 8
    with pytest.raises(InputError, match=r"^--engine-workers 9: at most 8 on this host \(4 per usable core\): "
                                         r"each engine holds its own weights$"):
        build_config(parser.parse_args(["serve", "--engine-workers", "9"]))
    # every worker process loads its engines: --workers 8 --engine-workers 8 would be 64
    assert build_config(parser.parse_args(["serve", "--workers", "2", "--engine-workers", "4"])).workers == 2
    with pytest.raises(InputError, match=r"^--workers 2 x --engine-workers 5 = 10: at most 8 on this host"):
        build_config(parser.parse_args(["serve", "--workers", "2", "--engine-workers", "5"]))


def test_evaluate_engines_are_capped_at_four_per_usable_core(monkeypatch, tmp_path):
    from streampunct.cli import build_parser
    from streampunct.commands.evaluate import run
    from streampunct.errors import InputError

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)
    args = build_parser().parse_args(["evaluate", "--data", str(tmp_path / "none.tsv"), "--workers", "9"])
    with pytest.raises(InputError, match=r"^--workers 9: at most 8 on this host \(4 per usable core\): "
                                         r"each engine holds its own weights$"):
        run(args)  # before the data is read (it does not exist)


async def test_sigterm_while_the_workers_load_stops_them_all_with_no_ready_line(tmp_path):
    """A signal during startup is neither lost nor fatal: workers still loading (a warm-up of
    seconds) stop, and the supervisor exits 0 without announcing anything."""
    async with serving(tmp_path, "--engine-option", "batch_ms=2000", "--engine-option", "sleep=true") as server:
        def both_loading() -> bool:  # both workers loading; the supervisor must not have exited
            assert server.proc.returncode is None, server.log.read_text()
            return server.log.read_text().count("server listening on") >= 2

        await until(both_loading, timeout=60)
        server.proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(server.proc.wait(), 30) == 0, server.log.read_text()
        assert await server.proc.stdout.read() == b""
        assert server.log.read_text().count(") exited\n") == 2


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie no init process reaped yet does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_workers_whose_supervisor_is_killed_drain_and_exit(tmp_path):
    async with serving(tmp_path) as server:
        await server.ready_line()
        health = await server.workers_by_health(2)
        client = await pending_stream(server, 0)
        server.proc.kill()
        transcript = await read_to_close(client)
        assert transcript.words == WORDS and client.close_code == 1001
        await until(lambda: not any(_running(h["pid"]) for h in health.values()), timeout=20)
        assert server.log.read_text().count("the supervisor is gone; shutting down") == 2


async def test_sighup_ends_the_supervisor_at_once_and_the_workers_drain(tmp_path):
    """A closed terminal or a dropped ssh session (SIGHUP): the supervisor exits at once with 129,
    and its workers drain (every word final, 1001) instead of being killed with their words."""
    async with serving(tmp_path) as server:
        await server.ready_line()
        health = await server.workers_by_health(2)
        clients = [await pending_stream(server, w) for w in (0, 1)]
        server.proc.send_signal(signal.SIGHUP)
        assert await asyncio.wait_for(server.proc.wait(), 30) == 129
        for client in clients:
            transcript = await read_to_close(client)
            assert transcript.words == WORDS and client.close_code == 1001
        await until(lambda: not any(_running(h["pid"]) for h in health.values()), timeout=20)
        assert "its 2 workers drain by themselves" in server.log.read_text()


#: An engine call of seconds: a drain lasts that long, so that the test's signals come during it.
SLOW_ENGINE = ("--engine-option", "batch_ms=2000", "--engine-option", "sleep=true")


async def test_a_stop_signal_sent_to_every_process_at_once_drains(tmp_path):
    """systemd's default KillMode=control-group (or a kill of every pid) sends SIGTERM to the
    supervisor and to each worker; the supervisor passes its own on. A worker got two and took
    them for Ctrl-C twice: the drain was cut short, its clients closed with no final. One stop
    from two senders drains: every word final, 1001 with the plain reason, status 0."""
    async with serving(tmp_path, *SLOW_ENGINE) as server:
        await server.ready_line()
        health = await server.workers_by_health(2)
        clients = [await pending_stream(server, w) for w in (0, 1)]
        for h in health.values():  # the service manager's signal reaches each worker itself...
            os.kill(h["pid"], signal.SIGTERM)
        await until(lambda: server.log.read_text().count("SIGTERM received; shutting down") == 2, timeout=10)
        server.proc.send_signal(signal.SIGTERM)  # ...and the supervisor, which passes it on
        for client in clients:
            transcript = await read_to_close(client)
            assert transcript.words == WORDS, server.log.read_text()
            assert (client.close_code, client.close_reason) == (1001, "server shutting down")
        assert await asyncio.wait_for(server.proc.wait(), 30) == 0
        log = server.log.read_text()  # each worker had both signals while it drained
        assert log.count("the same stop as the first") == 2 and "received again: closing" not in log


async def test_a_second_stop_signal_to_the_supervisor_cuts_the_workers_drain_short(tmp_path):
    """Ctrl-C twice (two signals to the supervisor, each passed on): the workers close the
    sessions still draining at once, with the reason that says so."""
    from streampunct.server.app import DRAIN_CUT_SHORT_REASON

    async with serving(tmp_path, *SLOW_ENGINE) as server:
        await server.ready_line()
        await server.workers_by_health(2)
        clients = [await pending_stream(server, w) for w in (0, 1)]
        server.proc.send_signal(signal.SIGTERM)
        await until(lambda: server.log.read_text().count("SIGTERM received; shutting down") == 2, timeout=10)
        server.proc.send_signal(signal.SIGTERM)
        for client in clients:
            await read_to_close(client)
            assert (client.close_code, client.close_reason) == (1001, DRAIN_CUT_SHORT_REASON)
        assert await asyncio.wait_for(server.proc.wait(), 30) == 0
        assert server.log.read_text().count("received again: closing the sessions still draining now") == 2


async def test_sighup_drains_a_single_server_which_exits_129(tmp_path):
    """Without --workers too: SIGHUP closed every client with 1011 and cut its words; now the
    server drains as after SIGTERM (every word final, 1001) and exits with 129."""
    async with serving(tmp_path, workers=1) as server:
        await server.ready_line()
        client = await StreamClient.connect(server.url, right_context=100, max_delay_ms=600_000)
        await client.send_words(WORDS)
        await client.send_raw('{"type": "barrier"}')
        assert isinstance(await client.recv(timeout=10), Error)
        server.proc.send_signal(signal.SIGHUP)
        transcript = await read_to_close(client)
        assert transcript.words == WORDS and client.close_code == 1001
        assert await asyncio.wait_for(server.proc.wait(), 30) == 129
        assert "SIGHUP received; shutting down" in server.log.read_text()


def test_live_gauges_are_written_when_a_single_server_keeps_values_in_files(monkeypatch):
    """A single server started with ``$PROMETHEUS_MULTIPROC_DIR`` set (prometheus-client keeps its
    values in files): the backlog and queue gauges show their values, not 0."""
    from streampunct.server import metrics

    monkeypatch.setattr(metrics, "values_in_files", lambda: True)
    m = metrics.ServerMetrics()
    assert not m.multiprocess
    m.backlog.set_function(lambda: 12.0)
    m.queue_depth.set_function(lambda: 3.0)
    text = m.render().decode()
    assert re.search(r"^streampunct_backlog_words 12\.0$", text, re.M), text
    assert re.search(r"^streampunct_queue_depth 3\.0$", text, re.M), text


def test_a_workers_log_lines_name_it_after_the_time():
    import logging

    from streampunct.server.workers import _Prefixed

    record = logging.LogRecord("streampunct.server.app", logging.INFO, __file__, 1, "session=%s closed", ("a",),
                               None)
    timed = _Prefixed(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"), "[worker 1] ")
    line = timed.format(record)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} \[worker 1\] INFO streampunct\.server\.app: "
                        r"session=a closed", line), line
    plain = _Prefixed(logging.Formatter("%(levelname)s %(message)s"), "[worker 1] ")
    assert plain.format(record) == "[worker 1] INFO session=a closed"
    # a format that goes on with the time right after asctime is not cut there
    millis = _Prefixed(logging.Formatter("%(asctime)s.%(msecs)03d %(message)s", "%H:%M:%S"), "[worker 1] ")
    assert re.fullmatch(r"\[worker 1\] \d\d:\d\d:\d\d\.\d{3} session=a closed", millis.format(record))


def test_a_supervisor_removes_the_metric_folders_nobody_holds(tmp_path, monkeypatch):
    import subprocess
    import tempfile

    from streampunct.server import workers

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    names = ["streampunct-metrics-left", "streampunct-metrics-held", "streampunct-metrics-held-elsewhere",
             "streampunct-metrics-old-style", "other"]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "counter_1.db").write_bytes(b"x")
        if name != "streampunct-metrics-old-style":  # an older version's folder: no lock file
            (tmp_path / name / workers.METRICS_LOCK).write_bytes(b"")
    held = workers._hold_metrics_dir(str(tmp_path / "streampunct-metrics-held"))
    # another process holds one (a worker draining after its supervisor was killed; another PID
    # namespace sharing the temporary directory): until it ends
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); sys.stdin.read()",
         str(tmp_path / "streampunct-metrics-held-elsewhere" / workers.METRICS_LOCK)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        workers._remove_orphaned_metrics_dirs()
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n for n in names if not n.endswith("-left"))
    finally:
        holder.stdin.close()
        holder.wait()
        os.close(held)
    workers._remove_orphaned_metrics_dirs()  # their holders are gone now
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "streampunct-metrics-old-style"]


@pytest.mark.parametrize("stopped", ["the supervisor", "every process"])
async def test_a_supervisor_that_did_not_run_for_a_while_kills_no_worker(tmp_path, stopped):
    """Ctrl-Z and fg, docker pause, a frozen VM: the supervisor (alone, or with its workers) runs
    again after more than the hang timeout. The beats it did not read are no sign of a hang."""
    async with serving(tmp_path, "--worker-hang-timeout-s", "1") as server:
        await server.ready_line()
        health = await server.workers_by_health(2)
        pids = [server.proc.pid] + ([w["pid"] for w in health.values()] if stopped == "every process" else [])
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            # The pause itself is what is tested: three hang timeouts of not running.
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(asyncio.shield(server.proc.wait()), 3)
        finally:
            for pid in reversed(pids):
                os.kill(pid, signal.SIGCONT)
        clients = [await pending_stream(server, worker) for worker in (0, 1)]  # both still serve
        for client in clients:
            await client.send_raw('{"type": "barrier"}')
            assert isinstance(await client.recv(timeout=10), Error)
        assert server.proc.returncode is None
        assert "killing it" not in server.log.read_text()


@pytest.mark.parametrize("cache", ["file", "/proc/no/such"])
def test_an_itn_cache_that_cannot_be_made_is_refused_before_any_worker_starts(tmp_path, cache):
    """It used to fail in the ITN worker processes: three tracebacks and a broken pool."""
    pytest.importorskip("pynini", reason="needs the itn extra")
    from streampunct.cli import build_parser
    from streampunct.commands.serve import build_config
    from streampunct.errors import InputError

    if cache == "file":
        cache = tmp_path / "cache.txt"
        cache.write_text("x")
    args = build_parser().parse_args(["serve", "--itn", "--itn-cache", str(cache)])
    why = "Not a directory" if str(cache).endswith(".txt") else "No such file or directory"
    with pytest.raises(InputError, match=rf"^--itn-cache {cache}: cannot make the folder for the compiled "
                                         rf"grammars there \({why}\)$"):
        build_config(args)
    ok = build_config(build_parser().parse_args(["serve", "--itn", "--itn-cache", str(tmp_path / "new")]))
    assert ok.itn_cache == tmp_path / "new" and (tmp_path / "new").is_dir()


@pytest.mark.parametrize("how", ["stops", "is slow"])
async def test_a_worker_judged_before_its_first_beat(tmp_path, how):
    # The workers stop themselves as their interpreter starts (a sitecustomize that only the
    # spawned workers run), before their startup thread beats once: each is judged from its start
    # (after FIRST_BEAT_S, not four hang timeouts: imports on a slow host are no hang, and
    # workers that take 5 s to import with a hang timeout of 1 s start).
    site = tmp_path / "site"
    site.mkdir()
    act = "os.kill(os.getpid(), signal.SIGSTOP)" if how == "stops" else "time.sleep(5)"
    (site / "sitecustomize.py").write_text(
        "import os, signal, sys, time\n"
        "if 'spawn_main' in ' '.join(getattr(sys, 'orig_argv', ())):\n"
        f"    {act}\n")
    path = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    async with serving(tmp_path, "--worker-hang-timeout-s", "1", env={"PYTHONPATH": path}) as server:
        if how == "is slow":
            async with asyncio.timeout(60):
                while len(re.findall(r"worker \d \(pid \d+\) ready", server.log.read_text())) < 2:
                    await asyncio.sleep(0.05)
            assert "has not answered" not in server.log.read_text()
            return
        assert await asyncio.wait_for(server.proc.wait(), 60) == 1
        log = server.log.read_text()
        pids = [int(p) for p in re.findall(r"worker \d \(pid (\d+)\) started", log)]
        assert len(pids) == 2
        for i, pid in enumerate(pids):
            assert re.search(rf"worker {i} \(pid {pid}\) has not answered for 2\ds while starting "
                             r"\(worker_hang_timeout_s 1\); killing it", log), log
            assert not _running(pid)
        assert "ready on ws://" not in log


async def test_a_worker_stopped_while_it_loads_is_found_too(tmp_path):
    # Worker 0 listens (the kernel hands it connections) and then stops before its engine is warm:
    # its startup thread's beats stop with it, so it is killed as a ready one would be, instead of
    # holding its share of the connections with no ready line ever. A warm-up of two 2 s calls:
    # worker 0 is stopped well within it, and worker 1 is ready by the time worker 0 is killed
    # (4 s after its last beat), so that it drains at once instead of finishing a call first.
    async with serving(tmp_path, "--worker-hang-timeout-s", "1",
                       "--engine-option", "batch_ms=2000", "--engine-option", "sleep=true") as server:
        async with asyncio.timeout(60):
            while not re.search(r"\[worker 0\] .*server listening", server.log.read_text()):
                await asyncio.sleep(0.05)
        pid = int(re.search(r"worker 0 \(pid (\d+)\) started", server.log.read_text()).group(1))
        os.kill(pid, signal.SIGSTOP)
        assert await asyncio.wait_for(server.proc.wait(), 60) == 1
        log = server.log.read_text()
        assert re.search(rf"worker 0 \(pid {pid}\) has not answered for \d+s while starting "
                         r"\(worker_hang_timeout_s 1\); killing it", log), log
        assert "ready on ws://" not in log
        assert not _running(pid)
