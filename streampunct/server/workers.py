"""``serve --workers N``: N server processes on one listening address, under a supervisor.

The supervisor (:func:`supervise`, the process ``serve`` started) loads no engine and serves
nothing itself:

- **Port.** It checks that ``host:port`` is free (a plain bind, which fails while anything listens
  there, an ``SO_REUSEPORT`` group included), picks the real port when ``--port 0``, and holds it
  with bound, not listening, ``SO_REUSEPORT`` sockets (:func:`reserve_port`, :func:`_held_socket`) until every worker
  listens. Each worker then listens on that port with ``SO_REUSEPORT`` (``ServerConfig.workers >
  1``) and the kernel spreads new connections over the workers (by a hash of their addresses, not
  by load).
- **Workers.** N processes of the ``spawn`` start method, each with its own event loop, engine
  workers and sessions: a :class:`~streampunct.server.app.ServerConfig` of its own
  (:func:`worker_config`: its index, ``ceil(max_sessions / N)`` sessions, the real port). The
  ready line is printed once every worker's engine is warm.
- **Signals.** SIGTERM and SIGINT are forwarded to every worker, each of which drains as a
  single server does (``--drain``); the supervisor exits once they have all exited: 0 when each
  exited cleanly. The workers start with both signals blocked and unblock them once they can
  act on them, so that a signal during startup is never lost nor fatal. A worker cuts its drain
  short on a second stop only (:func:`_asks_twice`): one signal that reached it both itself and
  through the supervisor (systemd signals every process of the service) is one stop, and the
  stop the supervisor sends on its own (a worker died) is none of the operator's.
- **A worker that dies** (any exit the supervisor did not ask for) is not restarted: the
  supervisor drains the others (SIGTERM) and exits with status 1, so that what restarts the
  service (systemd, Kubernetes, a shell loop) sees the failure. **A worker that hangs** is
  treated the same way: each worker tells the supervisor it is alive every
  ``worker_hang_timeout_s / HEARTBEATS_PER_TIMEOUT`` seconds (from its event loop once ready;
  from a thread while it starts, so that a stopped process is found then too, judged on
  ``STARTUP_HANG_FACTOR`` timeouts since a load may hold the GIL); one silent for
  ``worker_hang_timeout_s`` (a loop blocked in a call that never returns, a stopped process) is
  killed (SIGKILL), since the kernel would go on handing it a share of the new connections and a
  balancer's ``/healthz`` probe reaches only the worker the kernel picks. A worker that fails to start
  makes ``serve`` fail with its error. A worker whose supervisor is gone (SIGKILL) drains and
  exits by itself.
- **Metrics.** The supervisor points ``$PROMETHEUS_MULTIPROC_DIR`` at a fresh folder of its own
  (removed at exit; one that a killed supervisor and its workers left is removed by the next
  supervisor to start: nobody holds its lock), so that
  ``/metrics`` sums every worker whichever answers
  (:class:`~streampunct.server.metrics.ServerMetrics`); ``/healthz`` is the answering worker's,
  and names it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import math
import multiprocessing
import os
import pickle
import select
import shutil
import signal
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING

from streampunct.server.app import STOP_SIGNALS

if TYPE_CHECKING:
    from ctypes import c_int
    from multiprocessing.process import BaseProcess

    from streampunct.server.app import ServerConfig, StreamServer

logger = logging.getLogger(__name__)

#: Seconds between the supervisor's looks at its deadline (it wakes at once for the workers' news).
POLL_S = 1.0
#: A starting worker is judged on this many hang timeouts: its beats come from a thread, which
#: a load that holds the GIL (ONNX Runtime builds its sessions so) holds up for that long.
STARTUP_HANG_FACTOR = 4
#: The least time a worker has from its start to its first beat (which its startup thread sends
#: once the worker's modules are imported): a slow host's imports are no hang, a worker stopped
#: in them is found after this.
FIRST_BEAT_S = 20.0
#: Heartbeats a worker sends within ``ServerConfig.worker_hang_timeout_s``: one late or lost
#: beat (a busy loop, a slow host) is far from a hang.
HEARTBEATS_PER_TIMEOUT = 6
#: Extra seconds the supervisor waits, past a worker's own shutdown bound
#: (``shutdown_timeout_s + close_timeout_s``), before it kills the workers still running.
STOP_GRACE_S = 15.0


def sessions_per_worker(max_sessions: int, workers: int) -> int:
    """Each worker's part of ``--max-sessions``: ``ceil(max_sessions / workers)``."""
    return math.ceil(max_sessions / workers)


def worker_config(config: ServerConfig, worker: int, workers: int, port: int) -> ServerConfig:
    """The config of worker ``worker`` of ``workers``: the real ``port``, its place, and its part of
    the sessions (:func:`sessions_per_worker`); the rest (auth token, limits, drain) is the server's."""
    return replace(config, port=port, worker=worker, workers=workers,
                   max_sessions=sessions_per_worker(config.max_sessions, workers))


def reserve_port(host: str, port: int) -> tuple[list[socket.socket], int]:
    """Bound (not listening) ``SO_REUSEPORT`` sockets on every address of ``host`` (as asyncio's
    ``create_server`` resolves it), on ``port`` or, when 0, a free port: (the sockets, the port).
    Each is bound only after a plain bind of the same address succeeded, so that a port another
    server listens on (workers of another supervisor included), or that another supervisor holds
    while its workers start (:func:`_held_socket`), is refused as in use.
    Raises :class:`~streampunct.errors.InputError`."""
    from streampunct.errors import InputError

    infos = []
    try:
        for family, kind, proto, _, address in socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                                  flags=socket.AI_PASSIVE):
            if (family, address) not in [(f, a) for f, _, _, a in infos]:
                infos.append((family, kind, proto, address))
    except OSError as e:
        raise InputError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    attempts = 10 if port == 0 else 1  # port 0 over several addresses: one may hold the first's port
    for attempt in range(attempts):
        held: list[socket.socket] = []
        chosen = port
        try:
            for family, kind, proto, address in infos:
                address = (address[0], chosen, *address[2:])
                with _socket(family, kind, proto, reuse_port=False) as probe:
                    probe.bind(address)
                    chosen = probe.getsockname()[1]
                held.append(_held_socket(family, kind, proto, (address[0], chosen, *address[2:])))
            return held, chosen
        except OSError as e:
            for sock in held:
                sock.close()
            if attempt == attempts - 1:
                raise InputError(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    raise AssertionError("unreachable")


def _held_socket(family: int, kind: int, proto: int, address: tuple) -> socket.socket:
    """The supervisor's socket on ``address`` while its workers start: ``SO_REUSEPORT`` without
    ``SO_REUSEADDR``, so that another server's check (a plain bind with ``SO_REUSEADDR``, as every
    server binds) conflicts with it until the workers listen. Two sockets that both have
    ``SO_REUSEADDR`` share a port while neither listens (Linux), so with it a second supervisor
    started meanwhile would pass its check and join the port's ``SO_REUSEPORT`` group. Where the
    port still has TIME_WAIT connections of a server without ``SO_REUSEPORT`` (a restart), only
    ``SO_REUSEADDR`` binds it: then both, as before."""
    for reuse_addr in (False, True):
        sock = _socket(family, kind, proto, reuse_port=True, reuse_addr=reuse_addr)
        try:
            sock.bind(address)
            return sock
        except OSError as e:
            sock.close()
            if reuse_addr or e.errno != errno.EADDRINUSE:
                raise
    raise AssertionError("unreachable")


def _socket(family: int, kind: int, proto: int, *, reuse_port: bool, reuse_addr: bool = True) -> socket.socket:
    """A socket with the options asyncio's ``create_server`` gives its own (``reuse_addr``: see
    :func:`_held_socket`)."""
    sock = socket.socket(family, kind, proto)
    if reuse_addr:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    return sock


# -- the supervisor ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Ready:
    """What the workers said once ready (the ready line's parts)."""

    model_name: str
    engine_name: str
    url: str


def supervise(
    config: ServerConfig,
    workers: int,
    *,
    setup: Callable[[], None] | None = None,
    on_ready: Callable[[Ready], None] | None = None,
) -> int:
    """Run ``workers`` server processes on ``config``'s address until SIGTERM or SIGINT, or until a
    worker dies; the exit status: 0 when every worker drained and exited cleanly, 1 when one died
    (the others are drained) or did not exit in time (killed).

    ``setup`` runs first in each worker (logging, the allocator; picklable: a module's function or a
    ``functools.partial`` of one); ``on_ready`` is called once every worker is ready. Raises
    :class:`~streampunct.errors.InputError` when the address is taken, and the error of a worker
    that failed to start (a model folder's ``ModelError``, say).
    """
    if workers < 2:
        raise ValueError("supervise() runs 2 workers or more; serve one with run_server()")
    sockets, port = reserve_port(config.host, config.port)
    _remove_orphaned_metrics_dirs()
    metrics_dir = tempfile.mkdtemp(prefix=METRICS_DIR_PREFIX)
    metrics_lock = _hold_metrics_dir(metrics_dir)
    saved_env = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # the workers inherit it (spawn)
    supervisor = _Supervisor(config, workers, port, setup)
    previous = {sig: signal.signal(sig, supervisor.forward) for sig in STOP_SIGNALS}
    left = False  # the workers were left to drain by themselves
    try:
        supervisor.start()
        return supervisor.run(sockets, on_ready)
    except KeyboardInterrupt:
        # Raised, not forwarded: SIGHUP (cli.Terminated: a closed terminal, a dropped ssh session).
        # The supervisor ends at once; its workers drain by themselves, as after a SIGKILL of it,
        # rather than be killed with their sessions' words.
        supervisor.leave()
        left = True
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sock in sockets:
            sock.close()
        if not left:
            supervisor.kill_all()
        if saved_env is None:
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
        else:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = saved_env
        os.close(metrics_lock)
        if not left:  # else the next supervisor removes it once no worker holds it
            shutil.rmtree(metrics_dir, ignore_errors=True)


#: The supervisor's metric files' folder, in the temporary directory: ``PREFIX<random>``.
METRICS_DIR_PREFIX = "streampunct-metrics-"
#: A file in it that the supervisor and each worker hold a shared ``flock`` on while they run:
#: a folder whose lock can be taken exclusively is used by nobody (prometheus-client reads only
#: its ``*.db`` files).
METRICS_LOCK = "streampunct.lock"


def _hold_metrics_dir(folder: str) -> int:
    """Take a shared lock on ``folder``'s lock file (created if missing); the descriptor, which
    holds it until it is closed or the process ends."""
    import fcntl

    fd = os.open(os.path.join(folder, METRICS_LOCK), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def _remove_orphaned_metrics_dirs() -> None:
    """Remove the metric folders this user's supervisors left behind (SIGKILL, a crash of the
    host): those whose lock nobody holds. A lock is held across PID namespaces and by workers
    still draining after their supervisor was killed; a folder without one (being created, or of
    an older version) is left alone."""
    import fcntl

    root = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(METRICS_DIR_PREFIX)]
    except OSError:
        return
    for name in names:
        folder = os.path.join(root, name)
        try:
            info = os.lstat(folder)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            fd = os.open(os.path.join(folder, METRICS_LOCK), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: a supervisor or its workers use it
            continue
        finally:
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.exists(folder):
            logger.info("removed %s, the metric files of a supervisor that is gone", name)


class _Supervisor:
    def __init__(self, config: ServerConfig, workers: int, port: int, setup: Callable[[], None] | None) -> None:
        self.config = config
        self.n = workers
        self.port = port
        self.setup = setup
        self.procs: list[BaseProcess] = []
        self.conns: dict[Connection, int] = {}
        self.stop_signal: int | None = None  # the first signal forwarded
        self.deadline: float | None = None  # set once stopping: the workers must be gone by then
        self.failed = False
        self.failed_to_start: set[int] = set()  # workers that reported their startup error
        self.error: BaseException | None = None  # the first startup error a worker reported
        self.heard: dict[int, float] = {}  # a worker's last heartbeat (monotonic), or its start
        self.ready: dict[int, Ready] = {}  # what each ready worker said
        self.hung: set[int] = set()  # workers killed for silence
        self.beat: set[int] = set()  # workers heard from (the others are judged from their start)
        # The stops passed on to the workers, which they read to tell a second stop (hurry) from
        # one signal that reached them twice: the supervisor's and a service manager's own, sent
        # to every process of the service at once (systemd's KillMode=control-group).
        self.stops: c_int | None = None
        # The stops the supervisor sent on its own (a worker died, hung or failed to start): no
        # operator's, so none counts toward a second one (:func:`_asks_twice`).
        self.own_stops: c_int | None = None

    def forward(self, sig: int, frame: object = None) -> None:
        """The signal handler: pass ``sig`` on to every worker (each drains)."""
        if self.stop_signal is None:
            self.stop_signal = sig
            logger.info("%s received; draining %d workers", signal.Signals(sig).name, self.n)
        self._stop(sig)

    def _stop(self, sig: int, *, own: bool = False) -> None:
        """Send ``sig`` to every running worker: a stop passed on (an operator's signal), or with
        ``own`` one the supervisor starts itself (a worker is gone), which the workers count apart."""
        running = [p for i, p in enumerate(self.procs)
                   if p.exitcode is None and p.pid is not None and i not in self.failed_to_start]
        counter = self.own_stops if own else self.stops
        if counter is not None and running:
            # before the signals: a worker that handles one reads it counted; with the stop signals
            # blocked, as forward() (their handler) may run between this read and write otherwise
            masked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            try:
                counter.value += 1
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, masked)
        if self.deadline is None:
            self.deadline = time.monotonic() + (
                self.config.shutdown_timeout_s + self.config.close_timeout_s + STOP_GRACE_S)
        for proc in running:
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                pass

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.stops = ctx.RawValue("i", 0)  # written by this process only (_stop), read by the workers
        self.own_stops = ctx.RawValue("i", 0)  # likewise
        # The workers start with the stop signals blocked (a spawned child inherits the mask) and
        # unblock them once they can handle them: a signal meanwhile waits instead of killing them.
        # The first spawn starts multiprocessing's resource tracker, which unblocks SIGINT and
        # SIGTERM after starting it (SIG_UNBLOCK, not the mask it found): started first, here.
        resource_tracker.ensure_running()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            for i in range(self.n):
                spec = pickle.dumps((worker_config(self.config, i, self.n, self.port), self.setup))
                reader, writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=worker_main, args=(spec, writer, self.stops, self.own_stops),
                                   name=f"streampunct-worker-{i}")
                proc.start()
                # judged from its start: a worker that stops before its first beat (in its imports)
                # is killed as one that stops later, not left holding a share of the port
                self.heard[i] = time.monotonic()
                logger.info("worker %d (pid %d) started", i, proc.pid)
                writer.close()
                self.procs.append(proc)
                self.conns[reader] = i
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)  # a signal that came meanwhile runs forward() now
        if self.stop_signal is not None and not self.stops.value:  # it came before any worker was there
            self._stop(self.stop_signal)

    def run(self, sockets: list[socket.socket], on_ready: Callable[[Ready], None] | None) -> int:
        alive = {proc.sentinel: i for i, proc in enumerate(self.procs)}
        passed = time.monotonic()
        while alive:
            # a bounded wait: a signal's handler may set the deadline while it waits
            timeout = POLL_S if self.deadline is None else min(POLL_S, max(0.0, self.deadline - time.monotonic()))
            events = wait([*self.conns, *alive], timeout)
            now = time.monotonic()
            if now - passed > POLL_S + self._beat_s():
                # The supervisor itself did not run (stopped, a frozen host): the workers' silence
                # since says nothing about them, and their beats of that time are still queued.
                self.heard = dict.fromkeys(self.heard, now)
            passed = now
            for event in events:
                if isinstance(event, Connection):
                    self._receive(event, sockets, on_ready)
                else:
                    i = alive.pop(event)
                    self._exited(i)
            self._kill_hung()
            if events or self.deadline is None or time.monotonic() < self.deadline:
                continue
            logger.error("%d workers still running %.0fs after the stop; killing them", len(alive),
                         self.config.shutdown_timeout_s + self.config.close_timeout_s + STOP_GRACE_S)
            self.kill_all()
            self.failed = True
        if self.error is not None:
            raise self.error
        return 1 if self.failed else 0

    def _receive(self, conn: Connection, sockets: list[socket.socket],
                 on_ready: Callable[[Ready], None] | None) -> None:
        """Every message waiting on a worker's pipe (its heartbeats may have piled up)."""
        i = self.conns[conn]
        while True:
            try:
                if not conn.poll(0):
                    return
                message = conn.recv()
            except (EOFError, OSError):
                del self.conns[conn]
                conn.close()
                return
            if message[0] == "alive":
                if i not in self.hung:
                    self.heard[i] = time.monotonic()
                    self.beat.add(i)
            elif message[0] == "ready":
                self.ready[i] = Ready(*message[1:])
                self.heard[i] = time.monotonic()
                self.beat.add(i)
                logger.info("worker %d (pid %d) ready", i, self.procs[i].pid)
                if len(self.ready) == self.n and self.deadline is None:
                    for sock in sockets:  # every worker listens: the port is held by them
                        sock.close()
                    if on_ready is not None:
                        on_ready(self.ready[0])
            elif message[0] == "failed":
                self.failed_to_start.add(i)  # it exits by itself: no signal, no second report
                self.failed = True
                if self.error is None:
                    self.error = _loaded_error(message[1])
                    self._stop(signal.SIGTERM, own=True)

    def _beat_s(self) -> float:
        """Seconds between a worker's heartbeats (0: none)."""
        timeout = self.config.worker_hang_timeout_s
        return 0.0 if timeout is None else timeout / HEARTBEATS_PER_TIMEOUT

    def _kill_hung(self) -> None:
        """SIGKILL each worker whose heartbeat is over ``worker_hang_timeout_s`` late, ready or
        still starting (not once the workers are stopping: the stop's own deadline bounds that);
        its exit then drains the others as any unexpected exit does (:meth:`_exited`)."""
        timeout = self.config.worker_hang_timeout_s
        if timeout is None or self.deadline is not None:
            return
        now = time.monotonic()
        for i, heard in list(self.heard.items()):
            proc = self.procs[i]
            limit = timeout if i in self.ready else STARTUP_HANG_FACTOR * timeout
            if i not in self.beat:
                limit = max(limit, FIRST_BEAT_S)
            if i in self.hung or proc.exitcode is not None or now - heard < limit:
                continue
            conn = next((c for c, k in self.conns.items() if k == i), None)
            try:
                if conn is not None and conn.poll(0):  # a beat came after this pass read the pipes
                    continue
            except OSError:
                pass
            self.hung.add(i)
            logger.error("worker %d (pid %d) has not answered for %.0fs%s (worker_hang_timeout_s %g); "
                         "killing it", i, proc.pid, now - heard, "" if i in self.ready else " while starting",
                         timeout)
            _kill_group(proc.pid)
            with contextlib.suppress(ProcessLookupError):  # one stopped before it made its group
                os.kill(proc.pid, signal.SIGKILL)

    def _cleanup_group(self, i: int) -> None:
        """What a worker that is gone leaves in its process group (its ITN pool) goes too."""
        if self.procs[i].pid is not None and i not in self.failed_to_start:
            _kill_group(self.procs[i].pid)

    def _exited(self, i: int) -> None:
        from prometheus_client import multiprocess

        proc = self.procs[i]
        proc.join()
        code = proc.exitcode
        multiprocess.mark_process_dead(proc.pid)  # its live gauges no longer count
        if i in self.failed_to_start:  # its error is what serve reports
            logger.info("worker %d (pid %d) failed to start (%s)", i, proc.pid, _exit_status(code))
            return
        # asked to stop (self.deadline), a worker may die of the signal itself: after its server
        # is closed, or when it fails to start, the loop's handlers are gone
        clean = code == 0 or (self.deadline is not None and code in (-signal.SIGTERM, -signal.SIGINT))
        if clean and self.deadline is not None:
            logger.info("worker %d (pid %d) exited", i, proc.pid)
            return
        self.failed = True
        self._cleanup_group(i)
        if self.deadline is None:
            what = "was killed for not answering" if i in self.hung else f"exited unexpectedly ({_exit_status(code)})"
            logger.error("worker %d (pid %d) %s; draining the others, then exiting with status 1", i, proc.pid,
                         what)
            self._stop(signal.SIGTERM, own=True)
        else:
            logger.error("worker %d (pid %d) exited with %s", i, proc.pid, _exit_status(code))

    def leave(self) -> None:
        """Tell every worker to drain (SIGTERM) and wait for none of them."""
        logger.warning("the supervisor ends at once; its %d workers drain by themselves", self.n)
        self._stop(signal.SIGTERM)

    def kill_all(self) -> None:
        for proc in self.procs:
            if proc.exitcode is None:
                if proc.pid is not None:
                    _kill_group(proc.pid)
                proc.kill()
                proc.join(5)


def _kill_group(pid: int) -> None:
    """SIGKILL the process group a worker leads (:func:`worker_main` makes its own, so that its
    children, the ITN pool's processes, go with it); nothing when there is none."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _exit_status(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"status {code}"


def _loaded_error(payload: bytes | str) -> BaseException:
    """A worker's startup error: its own exception when it is one streampunct reports in a line,
    else a StreampunctError that says what it was (its traceback is in the worker's log)."""
    from engines.base import EngineError
    from streampunct.errors import StreampunctError

    if isinstance(payload, bytes):
        try:
            error = pickle.loads(payload)
        except Exception:
            error = None
        if isinstance(error, StreampunctError | EngineError | OSError):
            return error
        payload = f"{type(error).__name__}: {error}" if error is not None else "an error that did not unpickle"
    return StreampunctError(f"a worker failed to start: {payload}")


# -- a worker ---------------------------------------------------------------------------------

#: The worker's stop event, set by the stop signals before the server's loop handles them.
_early_stop: asyncio.Event | None = None


def _early_signal(sig: int, frame: object) -> None:
    # Before the server's own handlers are in and after they are gone: no coroutine waits on the
    # event yet (run_until_signalled installs its handlers before it waits), so set() is safe here.
    if _early_stop is not None:
        _early_stop.set()


def worker_main(spec: bytes, conn: Connection, stops: c_int | None = None,
                own_stops: c_int | None = None) -> None:
    """A worker process (``spawn``): its server until the stop signals, reporting to the supervisor
    over ``conn``: ``("ready", model, engine, url)`` or ``("failed", pickled error)``. ``stops``: the
    stops the supervisor passed on; ``own_stops``: those it sent on its own (:func:`_asks_twice`)."""
    global _early_stop, _starting
    os.setpgid(0, 0)  # a group of its own: the supervisor kills it with its children (_kill_group)
    config, setup = pickle.loads(spec)
    if config.worker_hang_timeout_s is not None:
        _starting = _StartupBeats(conn, config.worker_hang_timeout_s / HEARTBEATS_PER_TIMEOUT)
    _early_stop = asyncio.Event()
    for sig in STOP_SIGNALS:
        signal.signal(sig, _early_signal)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by the supervisor (start())
    folder = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if folder and os.path.isfile(os.path.join(folder, METRICS_LOCK)):
        _hold_metrics_dir(folder)  # held until this process ends: its files are in use till then
    if setup is not None:
        setup()
    _prefix_log_lines(f"[worker {config.worker}] ")
    try:
        from streampunct.server.app import run_server

        run_server(config, on_ready=lambda server: _ready(server, conn), stop=_early_stop,
                   repeated=None if stops is None else functools.partial(_asks_twice, stops, own_stops))
    except BaseException as e:
        from engines.base import EngineError
        from streampunct.errors import StreampunctError

        if not isinstance(e, StreampunctError | EngineError | OSError):  # a fault, not a user's error
            logger.exception("worker %d failed", config.worker)
        try:
            payload: bytes | str = pickle.dumps(e)
        except Exception:
            payload = f"{type(e).__name__}: {e}"
        _stop_startup_beats()
        try:
            conn.send(("failed", payload))
        except OSError:
            pass
        raise SystemExit(1) from None
    finally:
        _stop_startup_beats()
        for sig in STOP_SIGNALS:  # a late signal (a second Ctrl-C) must not break the exit
            signal.signal(sig, _early_signal)
        conn.close()
    from streampunct.server.app import engine_abandoned, exit_now

    if engine_abandoned():  # stopped while its engine loaded: not waiting for that thread at exit
        exit_now(0)


def _asks_twice(stops: c_int, own_stops: c_int | None, received: int) -> bool:
    """Whether the ``received`` stop signals of a worker ask it twice to stop (cut its drain short):
    the supervisor passed on two (Ctrl-C twice), or two came from elsewhere. One the supervisor
    passed on and one sent to the worker itself (systemd signals every process of the service at
    once; ``kill`` of every pid) are one stop, which drains. The stops the supervisor sent on its
    own (``own_stops``: a worker died) are no operator's: none of them counts (after one, the
    service manager's single stop still drains)."""
    forwarded = stops.value
    own = own_stops.value if own_stops is not None else 0
    return forwarded >= 2 or received - forwarded - own >= 2


class _StartupBeats:
    """A starting worker's heartbeats, from a thread: until its loop beats (:func:`_ready`), a
    process that stops (a frozen host, SIGSTOP) while it loads is found as a ready one is. The
    thread needs the GIL, which a load may hold for a while (ONNX Runtime builds its sessions
    holding it): a starting worker is judged on ``STARTUP_HANG_FACTOR`` hang timeouts."""

    def __init__(self, conn: Connection, every_s: float) -> None:
        self._conn, self._every_s = conn, every_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="streampunct-startup-beats", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        fd = self._conn.fileno()
        while True:
            try:
                # a beat only when the pipe has room (a message this small is written whole):
                # a supervisor that does not read must not block the join in _ready
                if select.select([], [fd], [], 0)[1]:
                    self._conn.send(("alive",))
            except (OSError, ValueError):  # the supervisor is gone, or the pipe closed
                return
            if self._done.wait(self._every_s):
                return

    def stop(self) -> None:
        """No beat after this returns: the pipe is the caller's again."""
        self._done.set()
        self._thread.join()


_starting: _StartupBeats | None = None


def _stop_startup_beats() -> None:
    global _starting
    if _starting is not None:
        _starting.stop()
        _starting = None


def _ready(server: StreamServer, conn: Connection) -> None:
    _stop_startup_beats()  # the loop beats from here
    loop = asyncio.get_running_loop()
    parent = multiprocessing.parent_process()
    if parent is not None:  # the supervisor gone (killed): drain and exit
        def orphaned() -> None:
            loop.remove_reader(parent.sentinel)
            logger.warning("the supervisor is gone; shutting down")
            assert _early_stop is not None
            _early_stop.set()

        loop.add_reader(parent.sentinel, orphaned)
    if server.metrics.multiprocess:
        loop.create_task(_refresh_metrics(server), name="streampunct-metrics-refresh")
    conn.send(("ready", server.model_name, server.batcher.engine_name, server.url))
    # From here a full pipe (a supervisor that does not read) must not block the loop: a
    # heartbeat that does not fit is skipped (a message this small is written whole or not at all).
    os.set_blocking(conn.fileno(), False)
    if server.config.worker_hang_timeout_s is not None:
        loop.create_task(_heartbeat(conn, server.config.worker_hang_timeout_s / HEARTBEATS_PER_TIMEOUT),
                         name="streampunct-heartbeat")


async def _heartbeat(conn: Connection, every_s: float) -> None:
    """Tell the supervisor, from the event loop, that the loop runs (:meth:`_Supervisor._kill_hung`)."""
    while True:
        await asyncio.sleep(every_s)
        try:
            conn.send(("alive",))
        except BlockingIOError:  # the pipe is full: the supervisor is not reading now
            continue
        except OSError:  # the supervisor is gone: orphaned() drains this worker
            return


async def _refresh_metrics(server: StreamServer) -> None:
    """Write the worker's live gauges to its metric files now and then (the answering worker
    writes its own at each scrape): ``/metrics`` of another worker reads them."""
    from streampunct.server.metrics import REFRESH_S

    while True:
        server.metrics.refresh()
        await asyncio.sleep(REFRESH_S)


def _prefix_log_lines(prefix: str) -> None:
    """Put ``prefix`` on every record the root logger's handlers write (the workers share stderr):
    after the time where the format starts with it, else first."""
    for handler in logging.getLogger().handlers:
        inner = handler.formatter or logging.Formatter()
        handler.setFormatter(_Prefixed(inner, prefix))


class _Prefixed(logging.Formatter):
    def __init__(self, inner: logging.Formatter, prefix: str) -> None:
        super().__init__()
        self.inner = inner
        self.prefix = prefix

    def format(self, record: logging.LogRecord) -> str:
        text = self.inner.format(record)
        stamp = getattr(record, "asctime", None)  # set by a format that shows the time
        rest = text[len(stamp):] if stamp and text.startswith(stamp) else None
        if rest is not None and (not rest or rest[0].isspace()):  # the time first, as on other lines
            return f"{stamp} {self.prefix.rstrip()}{rest}"
        return self.prefix + text
