"""``streampunct serve``: the streaming punctuation server."""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import time

NAME = "serve"
HELP = "run the streaming punctuation WebSocket server"

#: Environment variable read when --auth-token is not given (keeps the token out of `ps`).
TOKEN_ENV = "STREAMPUNCT_AUTH_TOKEN"




def _engine_workers(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got {text!r}")
    return value


#: ``auto`` runs at most this many engines; on a larger host each gets cores / workers threads.
#: Every engine holds its own weights, and one event loop feeds them all: measured only on
#: 2 cores (docs/server.md, "Engine workers"), so the cap is a judgement, not a measurement.
AUTO_MAX_ENGINE_WORKERS = 8


def resolve_engine_workers(value: int | str, engine: str, workers: int = 1) -> int:
    """``auto``: one engine per physical core of a worker process's part of them (cores / ``workers``,
    at least 1) for onnxruntime (each single-threaded), at most :data:`AUTO_MAX_ENGINE_WORKERS`;
    1 for other backends."""
    if value != "auto":
        return int(value)
    if engine != "onnxruntime":
        return 1
    from engines.registry import physical_cores

    return min(max(1, physical_cores() // workers), AUTO_MAX_ENGINE_WORKERS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from engines.registry import BACKENDS, StreamCacheMode
    from streampunct.commands.argtypes import (
        add_engine_option,
        choices,
        finite_float,
        lexicon_file,
        non_negative_float,
        path_argument,
        port,
        positive_int,
        unit_interval,
    )
    from streampunct.core.options import SessionOptions
    from streampunct.core.wire import Limits
    from streampunct.model import model_folder_argument
    from streampunct.server.app import DrainMode, ItnGrammars, ServerConfig
    from streampunct.server.batcher import BatcherConfig, BatchRows
    from streampunct.server.event_loop import EventLoop

    parser.add_argument("--model", metavar="DIR", default=None, type=model_folder_argument,
                        help="model folder (default: $STREAMPUNCT_MODEL, else the shipped models/default; "
                             "--engine fake needs none and takes only its tokenizer)")
    parser.add_argument("--engine", default=ServerConfig.engine, choices=list(BACKENDS),
                        help="inference backend (fake: synthetic labels at a chosen cost, no model needed; "
                             "default: %(default)s)")
    add_engine_option(parser, "extra backend option (repeatable), e.g. intra_op_threads=2, "
                              "or the fake engine's batch_ms=0.5, token_us=20, sleep=true")
    parser.add_argument("--event-loop", choices=choices(EventLoop), default=str(ServerConfig.event_loop),
                        help="the server's event loop: uvloop, asyncio's own, or auto: uvloop where it is "
                             "installed, else asyncio (default: %(default)s)")
    net = parser.add_argument_group("network")
    net.add_argument("--host", default=ServerConfig.host,
                     help="bind address (default: %(default)s; binding elsewhere exposes the server)")
    net.add_argument("--port", type=port, default=ServerConfig.port,
                     help="port, 0 for any free one (default: %(default)s)")
    net.add_argument("--auth-token", default=None,
                     help=f"require this bearer token (default: ${TOKEN_ENV} if set)")
    net.add_argument("--allow-host", metavar="NAME", action="append", default=[],
                     help="also answer requests whose Host is NAME (a name or address, no port; repeatable; "
                          "'*': any), e.g. the name a proxy is reached by. Without it: the bound name, "
                          "loopback names when bound to loopback, the address the client reached; bound to "
                          "0.0.0.0 or :: with no --allow-host, any Host (docs/server.md)")
    net.add_argument("--allow-origin", metavar="ORIGIN", action="append", default=[],
                     help="also accept WebSocket handshakes from web pages of ORIGIN (scheme://host[:port]; "
                          "repeatable; '*': any page; 'null': file:// pages). Without it: only the server's "
                          "own origin (its /captions page); clients that send no Origin are unaffected")
    net.add_argument("--trusted-proxy", metavar="ADDR", action="append", default=[],
                     help="an IP address of a proxy in front (repeatable): log lines name the client its "
                          "X-Forwarded-For gives (HAProxy: option forwardfor), as 'CLIENT via PROXY:PORT'; "
                          "other peers' X-Forwarded-For is ignored")
    batch = parser.add_argument_group("batching")
    batch.add_argument("--max-batch", type=int, default=BatcherConfig.max_batch,
                       help="most window requests per engine call (default: %(default)s)")
    batch.add_argument("--max-wait-ms", type=finite_float, default=BatcherConfig.max_wait_ms,
                       help="longest a request waits for a batch to fill (default: %(default)s)")
    batch.add_argument("--max-queue", type=int, default=BatcherConfig.max_queue,
                       help="requests waiting for the engine before clients get 'overloaded' (default: %(default)s)")
    batch.add_argument("--engine-workers", type=_engine_workers, default="auto", metavar="N|auto",
                       help="engines run side by side, each on its own batches (auto: one per physical "
                            "core for onnxruntime, at most 8, 1 for other backends); onnxruntime engines get "
                            "physical cores / N intra-op threads each unless --engine-option "
                            "intra_op_threads= says otherwise (default: %(default)s)")
    batch.add_argument("--workers", type=positive_int, default=1, metavar="N",
                       help="server processes on the one address, each with its own event loop, engines and "
                            "sessions (SO_REUSEPORT; the cores and --max-sessions are split between them; "
                            "SIGTERM drains them all; at most 4 per usable core; docs/server.md, \"Worker processes\"; "
                            "default: %(default)s)")
    batch.add_argument("--worker-hang-timeout-s", type=non_negative_float, default=ServerConfig.worker_hang_timeout_s,
                       metavar="S",
                       help="with --workers: a worker that has not answered the supervisor for S seconds (its "
                            "event loop once ready; the process while it loads, for 4 S) is killed, the others "
                            "drain and serve exits with status 1, as when a worker dies; at least 1, or 0: never "
                            "(default: %(default)s)")
    batch.add_argument("--engine-stall-timeout-s", type=non_negative_float,
                       default=BatcherConfig.stall_timeout_s, metavar="S",
                       help="an engine call still running after S seconds (a wedged GPU driver, a deadlocked "
                            "library) marks the engine stalled: /healthz answers 503 \"stalled\", handshakes "
                            "503, until it returns; nothing is killed. Loading and warm-up are not watched; "
                            "0: never (default: %(default)s)")
    batch.add_argument("--stream-cache", choices=choices(StreamCacheMode), default=str(ServerConfig.stream_cache),
                       help="streaming windows with cached left context: auto (default) where the model "
                            "folder has a streaming graph (and does not say \"stream_cache\": false) and the "
                            "engine runs one (onnxruntime, torch); off: every window "
                            "encodes its left context (docs/server.md, \"Cached left context\")")
    batch.add_argument("--stream-cache-tokens", type=positive_int, default=None, metavar="N",
                       help="cached tokens per session with cached left context (default: the model "
                            "folder's stream_cache_tokens, 60 for the shipped model; at most the window's "
                            "positions are kept): fewer trade accuracy for capacity")
    batch.add_argument("--batch-rows", choices=choices(BatchRows), default=str(BatcherConfig.batch_rows),
                       help="how an engine worker runs the windows of a batch: 'padded' (one call, padded to "
                            "the longest), 'alone' (one call per window) or 'exact': alone where the engine's "
                            "rows depend on the rest of the batch (int8 graphs with dynamic activation "
                            "quantization), so labels never depend on the load, at some capacity "
                            "(default: %(default)s)")
    limits = parser.add_argument_group("limits")
    limits.add_argument("--max-sessions", type=int, default=ServerConfig.max_sessions,
                        help="open sessions; more are refused with HTTP 503 (default: %(default)s)")
    limits.add_argument("--max-words-per-message", type=positive_int, default=Limits.max_words_per_message,
                        help="most words in one message (default: %(default)s)")
    limits.add_argument("--max-message-bytes", type=int, default=ServerConfig.max_message_bytes,
                        help="WebSocket frame limit; larger frames close with 1009 (default: %(default)s)")
    limits.add_argument("--max-backlog-words", type=int, default=ServerConfig.max_backlog_words,
                        help="words received but not yet finalized past which a session stops reading "
                             "its socket until they drain (input backpressure; default: %(default)s)")
    limits.add_argument("--word-cache-words", type=int, default=ServerConfig.word_cache_words, metavar="N",
                        help="words whose sub-token ids are cached (least recently used ones go; about 130 "
                             "bytes + 8 per sub-token each: about 5 MB for the default of words of up to 16 "
                             "sub-tokens, 12 MB of the longest words taken; 0: none; "
                             "default: %(default)s)")
    limits.add_argument("--max-frames-per-s", type=finite_float, default=ServerConfig.max_frames_per_s,
                        help="frames a session's reader takes a second, after a burst of as many, a frame "
                             "counting once per started 256 characters or 100 us of the event loop's CPU it "
                             "took, whichever is more (pings and pongs too, apart); a "
                             "client sending faster is read more slowly (TCP "
                             "holds it), nothing is dropped; "
                             "0: no limit (default: %(default)s)")
    limits.add_argument("--send-timeout-s", type=finite_float, default=ServerConfig.send_timeout_s,
                        help="close a session with 1013 when a send to it stays blocked this long "
                             "(the client does not read); 0: wait as long as it takes (default: %(default)s)")
    limits.add_argument("--idle-timeout-s", type=finite_float, default=0.0,
                        help="finalize a session's words and close it with 1001 (reason 'idle timeout'; "
                             "a client may resume) when its client sends no frame this long; pings do "
                             "not count, so a silent microphone's stream is closed too; 0: never "
                             "(default: %(default)s)")
    stop = parser.add_argument_group("shutdown (SIGTERM, SIGINT)")
    stop.add_argument("--drain", choices=choices(DrainMode), default=str(ServerConfig.drain),
                      help="live streams at shutdown: 'finalize' every word received, then close with 1001; "
                           "'resume': close with 1012 at once, so that clients resume their undecided words "
                           "on another replica (docs/server.md, \"Draining\"; default: %(default)s)")
    stop.add_argument("--shutdown-timeout-s", type=finite_float, default=ServerConfig.shutdown_timeout_s,
                      help="longest the drain waits for sessions to finish before closing them anyway (each "
                           "close may take the close timeout, 10 s, more; default: %(default)s)")
    session = parser.add_argument_group("session defaults (clients may change them with 'config')")
    session.add_argument("--right-context", type=int, default=SessionOptions.right_context,
                         help="words after a word that make it final (default: %(default)s)")
    session.add_argument("--max-delay-ms", type=int, default=SessionOptions.max_delay_ms,
                         help="a word is final at the latest this long after it arrived (default: %(default)s)")
    session.add_argument("--partials", action=argparse.BooleanOptionalAction, default=SessionOptions.partials,
                         help="send provisional punctuation for the undecided tail")
    session.add_argument("--capitalize", action=argparse.BooleanOptionalAction,
                         default=SessionOptions.capitalize, help="capitalize sentence starts in 'text'")
    session.add_argument("--itn", action=argparse.BooleanOptionalAction, default=SessionOptions.itn,
                         help="write numbers, dates, times and money in 'text' as digits and symbols "
                              "(inverse text normalization; needs the itn extra and implies "
                              "--itn-grammars on)")
    interim = parser.add_argument_group("partials (the server's setting for every session)")
    interim.add_argument("--partial-mark-threshold", metavar="P", type=unit_interval,
                         default=ServerConfig.partial_mark_threshold,
                         help="partials show a word's mark only when the model gives it a probability of at "
                              "least P (0 <= P < 1; 0: every mark); finals never change (docs/formatting.md, "
                              "\"Interim stability\"; default: %(default)s)")
    written = parser.add_argument_group("written forms (docs/protocol.md, 'Written forms')")
    written.add_argument("--itn-grammars", choices=choices(ItnGrammars), default=str(ServerConfig.itn_grammars),
                         help="load the ITN grammars at startup (seconds, tens of MB), so that "
                              "sessions may ask for itn: on (needs the itn extra), auto (when it is "
                              "installed), off (default, unless --itn: a session's itn is ignored and "
                              "its config answer names no itn)")
    written.add_argument("--itn-cache", metavar="DIR", type=path_argument, default=None,
                         help="where the compiled ITN grammars are cached (default: "
                              "~/.cache/streampunct/itn; the first start compiles them, about half a minute)")
    written.add_argument("--itn-workers", metavar="N", type=int, default=ServerConfig.itn_workers,
                         help="processes that run the ITN grammars, each loading them (about 100 MB); 0: the "
                              "server's own process, where they hold the GIL and so stall the event loop "
                              "(default: %(default)s)")
    written.add_argument("--lexicon", metavar="FILE", type=lexicon_file, default=(),
                         help="the server's lexicon: one 'spoken<TAB>written' pair a line ('new york<TAB>New "
                              "York'), '#' comments; applies in every session, under its own config.lexicon")


#: Config fields whose option is named otherwise (a repeatable flag takes one value a time).
_FIELD_FLAGS = {"trusted_proxies": "trusted_proxy"}


def flag_names(message: str, args: argparse.Namespace) -> str:
    """``message`` with the names of the config fields that are options (``max_batch``) written as
    their flags (``--max-batch``): the configs check their own fields, the user knows the flags."""

    def flag(match: re.Match) -> str:
        name = match.group(1) or match.group(2)
        name = _FIELD_FLAGS.get(name, name)
        return "--" + name.replace("_", "-") if name in vars(args) else match.group(0)

    # a name in quotes ('right_context', as the options' rules write it) loses them
    return re.sub(r"'([a-z]+(?:_[a-z0-9]+)+)'|\b([a-z]+(?:_[a-z0-9]+)+)\b", flag, message)


#: ``--workers`` at most this many per usable core: each worker is a process with its own
#: engines (about 200 MB for the default model) and loop; more than the cores only adds memory.
WORKERS_PER_CORE = 4


def max_workers() -> int:
    """The most ``--workers`` this host takes (:data:`WORKERS_PER_CORE` per usable core)."""
    from engines.registry import usable_cores

    return WORKERS_PER_CORE * usable_cores()


def check_worker_count(what: str, n: int, why: str) -> None:
    """An :class:`InputError` when ``n`` processes or engines (``what``: the option) are more than
    :func:`max_workers`: a typo such as 400 is refused before anything loads."""
    from streampunct.errors import InputError

    if n > max_workers():
        raise InputError(f"{what} {n}: at most {max_workers()} on this host ({WORKERS_PER_CORE} per "
                         f"usable core): {why}")


def build_config(args: argparse.Namespace):
    """The :class:`ServerConfig` for parsed arguments (the CLI boundary).

    The configs' own checks raise ``ValueError`` naming their fields; the
    message is passed on with the fields named as flags (:func:`flag_names`).
    """
    from pathlib import Path

    from streampunct.core.options import INT_OPTIONS, OptionError, SessionOptions, check_options
    from streampunct.core.wire import Limits
    from streampunct.errors import InputError
    from streampunct.server.app import MIN_WORKER_HANG_TIMEOUT_S, ItnGrammars, ServerConfig
    from streampunct.server.batcher import BatcherConfig
    from streampunct.server.http_policy import is_header_token
    from streampunct.text.itn import available as itn_available

    limits = Limits(max_words_per_message=args.max_words_per_message)
    try:  # the options' own rules, within the server's limits (as a client's config)
        check_options({name: getattr(args, name) for name in INT_OPTIONS}, limits)
    except OptionError as e:
        raise InputError(flag_names(e.message, args)) from None
    if (args.itn or args.itn_grammars == ItnGrammars.ON) and not itn_available():
        flag = "--itn" if args.itn else "--itn-grammars on"
        raise InputError(f"{flag} needs the itn extra: pip install -e '.[itn]' in the streampunct checkout "
                         "(pip install '.[itn]' where it is installed from a copy, as in a container)")
    if args.itn_cache is not None and (args.itn or args.itn_grammars != ItnGrammars.OFF) and itn_available():
        from streampunct.text.itn import grammar_cache

        grammar_cache(args.itn_cache)  # a file or a folder it cannot make: said here, not by a worker
    check_worker_count("--workers", args.workers, "each worker loads its own engines and event loop")
    if args.engine_workers != "auto":  # engines of every worker process: they all hold their weights
        what = "--engine-workers" if args.workers == 1 else \
            f"--workers {args.workers} x --engine-workers {args.engine_workers} ="
        check_worker_count(what, args.workers * args.engine_workers, "each engine holds its own weights")
    if args.send_timeout_s < 0:  # the flag's 0 is the config's None
        raise InputError("--send-timeout-s must be >= 0 (0: no timeout)")
    if args.idle_timeout_s < 0:
        raise InputError("--idle-timeout-s must be >= 0 (0: never)")
    if 0 < args.worker_hang_timeout_s < MIN_WORKER_HANG_TIMEOUT_S:
        raise InputError(f"--worker-hang-timeout-s must be at least {MIN_WORKER_HANG_TIMEOUT_S:g}, or 0: never")
    if args.max_frames_per_s < 0:  # the flag's 0 is the config's None
        raise InputError("--max-frames-per-s must be >= 0 (0: no limit)")
    token = args.auth_token if args.auth_token is not None else os.environ.get(TOKEN_ENV)
    if token is not None:
        where = "--auth-token" if args.auth_token is not None else f"${TOKEN_ENV}"
        if not token.strip():  # `--auth-token "$UNSET"` must not leave the server open
            raise InputError(f"{where} is empty: give the token, or leave it out to serve without one")
        token = token.strip()  # a secret file's trailing newline: no client could send it in a header
        if not is_header_token(token):
            raise InputError(f"{where} holds spaces, control or non-ASCII characters, which an "
                             "Authorization header cannot carry: use visible ASCII characters")
    try:
        return ServerConfig(
            model_dir=Path(args.model) if args.model else None,
            engine=args.engine,
            engine_options=dict(args.engine_option),
            host=args.host,
            port=args.port,
            batching=BatcherConfig(args.max_batch, args.max_wait_ms, args.max_queue,
                                   resolve_engine_workers(args.engine_workers, args.engine, args.workers),
                                   args.batch_rows, stall_timeout_s=args.engine_stall_timeout_s or None),
            workers=args.workers,
            max_sessions=args.max_sessions,
            limits=limits,
            max_message_bytes=args.max_message_bytes,
            max_backlog_words=args.max_backlog_words,
            send_timeout_s=args.send_timeout_s or None,
            idle_timeout_s=args.idle_timeout_s or None,
            shutdown_timeout_s=args.shutdown_timeout_s,
            worker_hang_timeout_s=args.worker_hang_timeout_s or None,
            max_frames_per_s=args.max_frames_per_s or None,
            auth_token=token,
            allow_hosts=tuple(args.allow_host),
            trusted_proxies=tuple(args.trusted_proxy),
            allow_origins=tuple(args.allow_origin),
            word_cache_words=args.word_cache_words,
            session_defaults=SessionOptions(args.right_context, args.max_delay_ms, args.partials, args.capitalize,
                                            itn=args.itn),
            itn_grammars=ItnGrammars.ON if args.itn else args.itn_grammars,
            itn_cache=args.itn_cache,  # a Path (path_argument) or None
            itn_workers=args.itn_workers,
            lexicon=args.lexicon,
            stream_cache=args.stream_cache,
            stream_cache_tokens=args.stream_cache_tokens,
            drain=args.drain,
            partial_mark_threshold=args.partial_mark_threshold,
            event_loop=args.event_loop,
        )
    except ValueError as e:
        raise InputError(flag_names(str(e), args)) from None


#: glibc malloc arenas ``serve`` runs with unless ``$MALLOC_ARENA_MAX`` says otherwise: glibc's default
#: (8 per core) let a long soak's memory creep (docs/server.md, "Memory").
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # mallopt's parameter number for the arena limit (glibc malloc.h)


def limit_malloc_arenas(arenas: int = MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas (``mallopt(M_ARENA_MAX, arenas)``, what ``MALLOC_ARENA_MAX`` does)
    unless ``$MALLOC_ARENA_MAX`` is set. Call it before threads start: arenas already made stay.
    True when the cap was applied; False with the variable set, or without glibc (nothing done)."""
    import ctypes

    if os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return mallopt(_M_ARENA_MAX, arenas) == 1


#: The most descriptors ``serve`` asks for when its hard limit is unlimited (Linux's nr_open default).
MAX_OPEN_FILES = 1 << 20


def raise_open_files_limit() -> tuple[int, int] | None:
    """Raise the soft limit on open files to the hard one (each connection holds a descriptor,
    and one that never sends its request holds it for the 10 s handshake timeout: at a soft
    limit of 1024, a common default, about a thousand idle sockets shut every client and
    ``/healthz`` out). Returns (before, after), or None where the platform has no such limit."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = MAX_OPEN_FILES if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, target
    return soft, soft


def run(args: argparse.Namespace) -> int:
    from streampunct import __version__
    from streampunct.server.app import engine_abandoned, exit_now, run_server

    def announce(server) -> None:
        print(f"streampunct: serving {server.model_name} with {server.batcher.engine_name} "
              f"on {server.url} (Ctrl-C to stop)", flush=True)

    config = build_config(args)
    logging.getLogger("streampunct.server").info("streampunct %s", __version__)
    watch_parent()
    raise_open_files_limit()  # before --workers start: they inherit it
    if config.workers > 1:
        return _supervise(config, args)
    limit_malloc_arenas()  # before the engine's threads allocate
    stopped_by = run_server(config, on_ready=announce)
    hangup = getattr(signal, "SIGHUP", None)
    code = 128 + hangup if hangup is not None and stopped_by == hangup else 0  # a closed terminal: 129
    if engine_abandoned():  # stopped while the engine loaded: not waiting for that thread at exit
        exit_now(code)
    return code


#: A process that starts ``serve`` for itself (a bench) names itself here: the server then stops,
#: as on SIGTERM, once that process is gone, even killed outright (SIGKILL, the OOM killer).
PARENT_ENV = "STREAMPUNCT_PARENT_PID"


def watch_parent(interval_s: float = 0.5) -> None:
    """With :data:`PARENT_ENV` set: a thread that sends this process SIGTERM once its parent is no
    longer that process (it died, and the server was handed to another parent)."""
    import threading

    from streampunct.errors import InputError

    value = os.environ.get(PARENT_ENV, "")
    if not value:
        return
    try:
        parent = int(value)
    except ValueError:
        raise InputError(f"${PARENT_ENV} must be a process id, got {value!r}") from None

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        logging.getLogger("streampunct.server").warning("the process that started this server (%d) is gone: "
                                                        "stopping", parent)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _supervise(config, args: argparse.Namespace) -> int:
    """``--workers N``: N server processes (:mod:`streampunct.server.workers`); the same ready line,
    printed once every worker is ready."""
    import functools
    import logging

    from streampunct.server.workers import supervise

    def announce(ready) -> None:
        print(f"streampunct: serving {ready.model_name} with {ready.engine_name} on {ready.url} "
              f"({config.workers} workers; Ctrl-C to stop)", flush=True)

    setup = functools.partial(worker_setup, logging.getLevelName(logging.getLogger().getEffectiveLevel()))
    return supervise(config, config.workers, setup=setup, on_ready=announce)


def worker_setup(log_level: str) -> None:
    """What a worker process of ``--workers`` does first: the CLI's logging, the malloc arenas."""
    from streampunct.cli import configure_logging

    configure_logging(log_level)
    limit_malloc_arenas()
