"""The server under load: a child process on a free loopback port, its CPU and memory
(psutil), and plain HTTP GETs of its ``/healthz`` and ``/metrics``."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from benchmarks.common import REPO
from engines.deps import require

if TYPE_CHECKING:
    from benchmarks.load_bench import LoadBenchConfig

def require_model_folder(engine: str, model_dir: Path | None, *, options: str = "--model DIR") -> None:
    """InputError unless the server to start has a model folder (the fake engine needs none);
    ``options`` names what the user can pass instead, before ``or --engine fake``."""
    if engine == "fake":
        return
    from streampunct.errors import InputError
    from streampunct.model import DEFAULT_MODEL_DIR

    model = model_dir or DEFAULT_MODEL_DIR
    if not Path(model).is_dir():
        raise InputError(f"no model folder at {model}: pass {options} or --engine fake")


def machine_cpu_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of all cores since boot."""
    times = require("psutil", feature="the load benchmark").cpu_times()
    idle = times.idle + getattr(times, "iowait", 0.0)
    total = sum(times)
    return total - idle, total


_ANNOUNCE = re.compile(r"serving (\S+) with (\S+) on (ws://\S+)")


class ServerProcess:
    """A server in a child process, on a free loopback port (``--port 0``).

    The port is read from the line the server prints once its engine is
    ready (``... on ws://127.0.0.1:PORT/v1/stream``). Output goes to a log
    file (never a pipe that could fill up and block the server).
    """

    def __init__(
        self, cfg: LoadBenchConfig, max_sessions: int, workdir: Path, *, wrapper: Sequence[str] = ()
    ) -> None:
        """``wrapper``: arguments between the interpreter and ``-m MODULE`` (a runner module
        such as ``-m benchmarks.server_tracemalloc OUT``)."""
        self.cfg = cfg
        self.log_path = workdir / "server.log"
        self.profile_path = workdir / "server.prof" if cfg.profile else None
        python = [sys.executable, *wrapper]
        if self.profile_path is not None:
            python += ["-m", "cProfile", "-o", str(self.profile_path)]
        common = [
            "--port", "0", "--host", "127.0.0.1",
            "--max-batch", str(cfg.max_batch), "--max-wait-ms", str(cfg.max_wait_ms),
            "--max-sessions", str(max_sessions),
            "--right-context", str(cfg.right_context), "--max-delay-ms", str(cfg.max_delay_ms),
        ]
        if cfg.engine_workers is not None:
            common += ["--engine-workers", str(cfg.engine_workers)]
        if cfg.batch_rows is not None and cfg.engine != "fake":
            common += ["--batch-rows", cfg.batch_rows]
        if getattr(cfg, "stream_cache", None) is not None and cfg.engine != "fake":
            common += ["--stream-cache", cfg.stream_cache]
        if getattr(cfg, "stream_cache_tokens", None) is not None and cfg.engine != "fake":
            common += ["--stream-cache-tokens", str(cfg.stream_cache_tokens)]
        if getattr(cfg, "itn", "off") != "off":
            common += ["--itn-grammars", "on"]
            if cfg.itn_workers is not None:
                common += ["--itn-workers", str(cfg.itn_workers)]
        if cfg.engine == "fake":
            self.argv = [*python, "-m", "benchmarks.load_server", *common,
                         "--batch-ms", str(cfg.fake_batch_ms), "--token-us", str(cfg.fake_token_us)]
            if cfg.fake_sleep:
                self.argv.append("--sleep")
            if cfg.model_dir is not None:
                self.argv += ["--tokenizer", str(Path(cfg.model_dir) / "tokenizer.json")]
        else:
            self.argv = [*python, "-m", "streampunct.cli", "--log-level", "WARNING", "serve", *common,
                         "--engine", cfg.engine]
            if cfg.model_dir is not None:
                self.argv += ["--model", str(cfg.model_dir)]
            for option in cfg.engine_options:
                self.argv += ["--engine-option", option]
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.model: str | None = None
        self.engine: str | None = None

    def start(self) -> str:
        """Start it and wait until it is ready; returns its WebSocket URL."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO, env=env
            )
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            match = _ANNOUNCE.search(text)
            if match:
                self.model, self.engine, self.url = match.group(1), match.group(2), match.group(3)
                return self.url
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"the server exited with code {self.proc.returncode} before it was ready:\n"
                    + self.log_tail()
                )
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the server was not ready after {self.cfg.startup_timeout_s:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _measure(self, what):
        """``what(psutil.Process)`` of the server, or None once it is gone."""
        psutil = require("psutil", feature="the load benchmark")
        if not self.alive:
            return None
        try:
            return what(psutil.Process(self.proc.pid))  # type: ignore[union-attr]
        except psutil.Error:
            return None

    def cpu_seconds(self) -> float | None:
        """User + system CPU seconds of the server."""
        return self._measure(lambda p: p.cpu_times().user + p.cpu_times().system)

    def rss_mb(self) -> float | None:
        return self._measure(lambda p: p.memory_info().rss / 2**20)

    def signal(self, sig: int) -> bool:
        """Send ``sig`` to the server; False once it is gone."""
        if not self.alive:
            return False
        self.proc.send_signal(sig)  # type: ignore[union-attr]
        return True

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (graceful shutdown; cProfile writes its file), then SIGKILL if it hangs."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode


async def http_get(url: str, path: str, timeout: float = 5.0) -> tuple[int, str] | None:
    """GET ``path`` on the server of a ws:// URL (loopback); None if it cannot be reached."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
                await writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                status = int(lines[0].split()[1])
                length = None
                for line in lines[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value.strip())
                body = await (reader.readexactly(length) if length is not None else reader.read())
            finally:
                writer.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError, IndexError):
        return None
    return status, body.decode("utf-8", errors="replace")
