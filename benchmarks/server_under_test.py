"""The server under test of the benchmarks that start one (``bench load``, ``soak``, ``flood``,
``live``, ``hypotheses``, and the load ramps of ``triton``): its options
(:class:`ServerUnderTest`), their command-line flags (:func:`add_server_arguments`,
:func:`server_from_args`), the child process (:class:`ServerProcess`: a free loopback port,
its CPU and memory through psutil), and plain HTTP GETs of its ``/healthz`` and ``/metrics``.

It imports nothing from the benches: each bench holds a ``ServerUnderTest`` and offers the
flags it needs, with its own defaults where they differ.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from benchmarks.common import REPO, check_non_negative, check_positive
from engines.deps import require
from engines.registry import BACKENDS, StreamCacheMode
from streampunct.commands.argtypes import (
    choices,
    non_negative_float,
    non_negative_int,
    path_argument,
    positive_int,
)
from streampunct.core.options import SessionOptions
from streampunct.core.wire import DEFAULT_LIMITS
from streampunct.errors import StreampunctError
from streampunct.model import model_folder_argument
from streampunct.server.batcher import BatchRows


class ServerStartError(StreampunctError, RuntimeError):
    """The server a bench starts did not become ready (it exited, or timed out): one line
    and its log's tail at the CLI's error boundary, as any of the project's errors."""


@dataclass(frozen=True)
class ServerUnderTest:
    """The server a bench starts: ``streampunct serve`` on a model folder, or with ``engine="fake"``
    ``streampunct serve --engine fake`` (the real server over a synthetic engine, no model needed).

    Attributes:
        model_dir: model folder (None: the shipped model; with ``fake``, only its tokenizer).
        engine: backend (``onnxruntime``, ``tensorrt``, ``torch``, ...), or ``fake``.
        engine_options: ``KEY=VALUE`` strings, each a ``serve --engine-option``.
        max_batch, max_wait_ms: ``serve --max-batch``, ``--max-wait-ms``.
        engine_workers: ``serve --engine-workers`` (None: the server's default, ``auto``).
        workers: ``serve --workers``, server processes (None: the server's default, 1); the
            server's CPU (:meth:`ServerProcess.cpu_seconds`) counts them all.
        batch_rows: ``serve --batch-rows`` (None: the server's default).
        stream_cache: ``serve --stream-cache`` (None: the server's default).
        stream_cache_tokens: ``serve --stream-cache-tokens`` (None: the model's).
        right_context, max_delay_ms: the server's session defaults (``serve --right-context``,
            ``--max-delay-ms``); the benches' sessions ask for the same unless they say otherwise.
        itn_grammars: load the ITN grammars (``serve --itn-grammars on``), so sessions may ask for ``itn``.
        itn_workers: ``serve --itn-workers`` with the grammars (None: the server's default).
        fake_batch_ms, fake_token_us, fake_sleep: cost of the fake engine (per call, per padded
            token; idle instead of burning CPU): its engine options ``batch_ms``, ``token_us``,
            ``sleep`` (:func:`fake_engine_options`).
        profile: run the server under cProfile (its top functions go into the bench's report).
        server_src: run the server's code from this source tree (a ``git worktree`` of an earlier
            commit, say) with the same interpreter, so that one sitting compares two versions.
        startup_timeout_s: how long the server may take to load its engine.

    ``batch_rows``, ``stream_cache`` and ``stream_cache_tokens`` do not reach the fake server,
    whose model has no streaming graph; ``engine_options`` do, after the fake engine's costs.
    """

    model_dir: Path | None = None
    engine: str = "onnxruntime"
    engine_options: tuple[str, ...] = ()
    max_batch: int = 32
    max_wait_ms: float = 5.0
    engine_workers: int | None = None
    workers: int | None = None
    batch_rows: str | None = None
    stream_cache: str | None = None
    stream_cache_tokens: int | None = None
    right_context: int = SessionOptions.right_context
    max_delay_ms: int = SessionOptions.max_delay_ms
    itn_grammars: bool = False
    itn_workers: int | None = None
    fake_batch_ms: float = 0.0
    fake_token_us: float = 0.0
    fake_sleep: bool = False
    profile: bool = False
    server_src: Path | None = None
    startup_timeout_s: float = 180.0

    def __post_init__(self) -> None:
        if self.itn_workers is not None and self.itn_workers < 0:
            raise ValueError("itn_workers must be >= 0")
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, not {self.max_batch}")
        for name in ("engine_workers", "workers", "stream_cache_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, not {value}")
        check_non_negative(max_wait_ms=self.max_wait_ms, fake_batch_ms=self.fake_batch_ms,
                           fake_token_us=self.fake_token_us)
        check_positive(startup_timeout_s=self.startup_timeout_s)
        self.session_options().check(DEFAULT_LIMITS)  # the options' rules, as serve checks them (ValueError)
        if self.server_src is not None and not (Path(self.server_src) / "streampunct" / "cli.py").is_file():
            # when parsed, not after the output folder and the data are ready
            raise ValueError(f"--server-src {self.server_src}: not a streampunct source tree (no streampunct/cli.py)")

    def to_json(self, names: Iterable[str] | None = None) -> dict:
        """The fields ``names`` (all: None), JSON-ready (paths as strings, tuples as lists)."""
        names = [f.name for f in fields(self)] if names is None else list(names)
        return json_ready({name: getattr(self, name) for name in names})

    def session_options(self) -> SessionOptions:
        """The server's session defaults."""
        return SessionOptions(right_context=self.right_context, max_delay_ms=self.max_delay_ms)


def json_ready(values: Mapping) -> dict:
    """``values`` with paths as strings and tuples as lists (a bench's ``config`` in its JSON)."""
    return {k: str(v) if isinstance(v, Path) else list(v) if isinstance(v, tuple) else v for k, v in values.items()}


# -- its flags -------------------------------------------------------------------------

_STARTED = "of the started server"


def _flags(d: ServerUnderTest) -> dict[str, tuple[str, dict]]:
    """ServerUnderTest field -> (flag, add_argument keywords) with ``d``'s defaults."""
    cache_default = d.stream_cache or "the server's, auto"
    return {
        "model_dir": ("--model", dict(type=model_folder_argument, default=d.model_dir,
                                      help="model folder (default: the shipped model)")),
        # serve's own list: a wrong name is the bench's usage error, not the child server's
        "engine": ("--engine", dict(default=d.engine, choices=list(BACKENDS), help="onnxruntime, tensorrt, torch, or fake (synthetic "
                                                           "engine, no model needed) (default: %(default)s)")),
        "engine_options": ("--engine-option", dict(
            action="append", metavar="KEY=VALUE",
            help=f"engine option {_STARTED} (serve --engine-option), e.g. cpu_mem_arena=false")),
        "max_batch": ("--max-batch", dict(type=positive_int, default=d.max_batch,
                                          help=f"serve --max-batch {_STARTED} (default: %(default)s)")),
        "max_wait_ms": ("--max-wait-ms", dict(type=non_negative_float, default=d.max_wait_ms,
                                              help=f"serve --max-wait-ms {_STARTED} (default: %(default)s)")),
        "engine_workers": ("--engine-workers", dict(
            type=positive_int, default=d.engine_workers,
            help=f"engines {_STARTED} runs side by side (default: the server's, auto)")),
        "workers": ("--workers", dict(
            type=positive_int, default=d.workers, metavar="N",
            help=f"server processes {_STARTED} runs on its port (serve --workers; default: the server's, 1)")),
        "batch_rows": ("--batch-rows", dict(choices=choices(BatchRows), default=d.batch_rows,
                                            help=f"serve --batch-rows {_STARTED} (default: the server's, exact)")),
        "stream_cache": ("--stream-cache", dict(choices=choices(StreamCacheMode), default=d.stream_cache,
                                                help=f"serve --stream-cache {_STARTED} (default: {cache_default})")),
        "stream_cache_tokens": ("--stream-cache-tokens", dict(
            type=positive_int, default=d.stream_cache_tokens, metavar="N",
            help=f"serve --stream-cache-tokens {_STARTED} (default: the model's)")),
        "right_context": ("--right-context", dict(
            type=non_negative_int, default=d.right_context,
            help="words after a word that make it final: the sessions' option and the started server's "
                 "default (default: %(default)s)")),
        "max_delay_ms": ("--max-delay-ms", dict(
            type=non_negative_int, default=d.max_delay_ms,
            help="a word is final at the latest this long after it was sent: the sessions' option and the "
                 "started server's default (default: %(default)s)")),
        "itn_workers": ("--itn-workers", dict(type=non_negative_int, default=d.itn_workers, metavar="N",
                                              help=f"serve --itn-workers {_STARTED} (default: the server's)")),
        "fake_batch_ms": ("--fake-batch-ms", dict(type=non_negative_float, default=d.fake_batch_ms,
                                                  help="--engine fake: cost per call (default: %(default)s)")),
        "fake_token_us": ("--fake-token-us", dict(type=non_negative_float, default=d.fake_token_us,
                                                  help="--engine fake: cost per token (default: %(default)s)")),
        "fake_sleep": ("--fake-sleep", dict(action="store_true", help="--engine fake: idle instead of burning CPU")),
        "profile": ("--profile", dict(action="store_true", help="run the started server under cProfile")),
        "server_src": ("--server-src", dict(
            type=path_argument, default=d.server_src, metavar="DIR",
            help="run the started server from this source tree (e.g. a git worktree of an earlier commit), "
                 "with the same interpreter: before/after in one sitting")),
    }


#: Every field that has a flag, in the order ``--help`` lists them.
SERVER_FLAGS: tuple[str, ...] = tuple(_flags(ServerUnderTest()))
#: Field -> the argparse ``dest`` of its flag (``model_dir`` -> ``model``).
_DESTS = {name: flag.removeprefix("--").replace("-", "_") for name, (flag, _) in _flags(ServerUnderTest()).items()}


def add_server_arguments(
    p: argparse.ArgumentParser | argparse._ArgumentGroup,
    defaults: ServerUnderTest = ServerUnderTest(),
    names: Sequence[str] = SERVER_FLAGS,
    *,
    helps: Mapping[str, str] | None = None,
) -> None:
    """Add the flags of the fields ``names`` (see :data:`SERVER_FLAGS`) with ``defaults``' values
    as their defaults; ``helps`` replaces the help of some. :func:`server_from_args` reads them back."""
    table = _flags(defaults)
    for name in names:
        flag, kwargs = table[name]
        if helps and name in helps:
            kwargs = dict(kwargs, help=helps[name])
        p.add_argument(flag, **kwargs)


def server_from_args(args: argparse.Namespace, defaults: ServerUnderTest = ServerUnderTest(),
                     **overrides) -> ServerUnderTest:
    """``defaults`` with the server flags that ``args`` has (:func:`add_server_arguments`), then ``overrides``."""
    values = {name: getattr(args, dest) for name, dest in _DESTS.items() if hasattr(args, dest)}
    if "engine_options" in values:
        values["engine_options"] = tuple(values["engine_options"] or ())
    return replace(defaults, **values, **overrides)


# -- the child process ---------------------------------------------------------------------


def bench_config(config_from_args: Callable[[argparse.Namespace], Any], args: argparse.Namespace, *,
                 url_allowed: bool = False) -> Any:
    """A bench's config from its parsed arguments: a bad value is an InputError, and the server
    it starts must have a model folder (:func:`require_model_folder`); with ``url_allowed``, a
    config whose ``url`` names a running server starts none."""
    from streampunct.errors import InputError

    try:
        cfg = config_from_args(args)
    except ValueError as e:
        raise InputError(str(e)) from None
    if not (url_allowed and cfg.url is not None):
        require_model_folder(cfg.server.engine, cfg.server.model_dir,
                             options="--model DIR, --url," if url_allowed else "--model DIR")
    return cfg


def require_model_folder(engine: str, model_dir: Path | None, *, options: str = "--model DIR") -> None:
    """InputError unless the server to start has a model folder (the fake engine needs none);
    ``options`` names what the user can pass instead, before ``or --engine fake``."""
    if engine == "fake":
        return
    from streampunct.errors import InputError
    from streampunct.model import default_model_dir

    model = model_dir or default_model_dir()
    if not Path(model).is_dir():
        raise InputError(f"no model folder at {model}: pass {options} or --engine fake")


def fake_engine_options(server: ServerUnderTest) -> tuple[str, ...]:
    """The fake engine's costs as ``serve --engine-option`` values (none for another engine)."""
    if server.engine != "fake":
        return ()
    options = (f"batch_ms={server.fake_batch_ms}", f"token_us={server.fake_token_us}")
    return (*options, "sleep=true") if server.fake_sleep else options


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
        self, server: ServerUnderTest, max_sessions: int, workdir: Path, *, wrapper: Sequence[str] = (),
        argv: Sequence[str] | None = None,
    ) -> None:
        """``wrapper``: arguments between the interpreter and ``-m MODULE`` (a runner module
        such as ``-m benchmarks.server_tracemalloc OUT``). ``argv``: a command of the caller's
        instead of the one ``server`` makes (it must print the same ready line)."""
        self.server = server
        self.log_path = workdir / "server.log"
        self.profile_path = workdir / "server.prof" if server.profile else None
        self.argv = list(argv) if argv is not None else self._argv(server, max_sessions, wrapper)
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.model: str | None = None
        self.engine: str | None = None

    def _argv(self, s: ServerUnderTest, max_sessions: int, wrapper: Sequence[str]) -> list[str]:
        python = [sys.executable, *wrapper]
        if self.profile_path is not None:
            python += ["-m", "cProfile", "-o", str(self.profile_path)]
        common = [
            "--port", "0", "--host", "127.0.0.1",
            "--max-batch", str(s.max_batch), "--max-wait-ms", str(s.max_wait_ms),
            # each of N workers takes max_sessions / N, and the kernel spreads connections unevenly:
            # let every worker take them all, so that the bench measures capacity, not the limit
            "--max-sessions", str(max_sessions * (s.workers or 1)),
            "--right-context", str(s.right_context), "--max-delay-ms", str(s.max_delay_ms),
        ]
        if s.engine_workers is not None:
            common += ["--engine-workers", str(s.engine_workers)]
        if s.workers is not None:
            common += ["--workers", str(s.workers)]
        if s.engine != "fake":  # the fake model has no streaming graph; it takes the server's batch_rows
            for flag, value in (("--batch-rows", s.batch_rows), ("--stream-cache", s.stream_cache),
                                ("--stream-cache-tokens", s.stream_cache_tokens)):
                if value is not None:
                    common += [flag, str(value)]
        if s.itn_grammars:
            common += ["--itn-grammars", "on"]
            if s.itn_workers is not None:
                common += ["--itn-workers", str(s.itn_workers)]
        argv = [*python, "-m", "streampunct.cli", "--log-level", "WARNING", "serve", *common, "--engine", s.engine]
        if s.model_dir is not None:
            argv += ["--model", str(Path(s.model_dir).expanduser().absolute())]  # the server runs in its tree
        for option in (*fake_engine_options(s), *s.engine_options):
            argv += ["--engine-option", option]
        return argv

    def start(self) -> str:
        """Start it and wait until it is ready; returns its WebSocket URL."""
        root = Path(self.server.server_src).resolve() if self.server.server_src is not None else REPO
        if not (root / "streampunct" / "cli.py").is_file():
            raise ServerStartError(f"--server-src {root}: not a streampunct source tree (no streampunct/cli.py)")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env["STREAMPUNCT_PARENT_PID"] = str(os.getpid())  # it stops once this bench is gone, even killed
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=root, env=env
            )
        deadline = time.monotonic() + self.server.startup_timeout_s
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            match = _ANNOUNCE.search(text)
            if match:
                self.model, self.engine, self.url = match.group(1), match.group(2), match.group(3)
                return self.url
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"the server exited with code {self.proc.returncode} before it was ready:\n"
                    + self.log_tail()
                )
            time.sleep(0.1)
        self.stop()
        raise ServerStartError(f"the server was not ready after {self.server.startup_timeout_s:.0f}s:\n{self.log_tail()}")

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
        """User + system CPU seconds of the server, all threads, its worker processes included
        (the live ones: a worker that exited is no longer counted)."""
        psutil = require("psutil", feature="the load benchmark")

        def total(p) -> float:
            seconds = 0.0
            for proc in [p, *p.children(recursive=True)]:
                try:
                    t = proc.cpu_times()
                except psutil.Error:  # a child that went away between the listing and the read
                    continue
                seconds += t.user + t.system
            return seconds

        return self._measure(total)

    def loop_cpu_seconds(self) -> float | None:
        """User + system CPU seconds of the main threads of the server and its worker processes:
        their event loops (frames, JSON, sessions, batching; the engines run in other threads),
        the part of a word's CPU that an accelerator does not take off the host. Of the child
        processes, those that listen (``--workers``) count; the ones that do not (the ITN
        grammars' workers, multiprocessing's resource tracker) run no loop and are left out."""
        psutil = require("psutil", feature="the load benchmark")

        def listens(proc) -> bool:
            connections = getattr(proc, "net_connections", None) or proc.connections  # psutil < 6
            return any(c.status == psutil.CONN_LISTEN for c in connections(kind="tcp"))

        def loops(p) -> float:
            seconds = 0.0
            for proc in [p, *p.children(recursive=True)]:
                try:
                    if proc.pid != p.pid and not listens(proc):
                        continue
                    main = next((t for t in proc.threads() if t.id == proc.pid), None)
                except psutil.Error:
                    continue
                if main is not None:
                    seconds += main.user_time + main.system_time
            return seconds

        return self._measure(loops)

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
