"""``bench hypotheses``: live caption sessions that send interim hypotheses, partials on.

Each session speaks a stretch of punctuated text (dev2010 by default) at 2.5 words/s in
1-4-word chunks; before each commit it sends two interim results (the chunk's first word
200 ms before, the whole chunk 100 ms before), as a streaming ASR does, through
:func:`streampunct.client.caption.caption`. Per step of N sessions (all at once) it reports the
p95 "margin after decidable" of each session (the client's view: from the moment a word
could be final to its final), their median and worst, the words finalized and the errors.

The server is started as a child process (the benches' :class:`ServerUnderTest`) or is a
running one (``--url``); the sessions ask for its ``right_context`` and ``max_delay_ms``::

    streampunct bench hypotheses --sessions 50 100 200 --duration 30
    streampunct bench hypotheses --url ws://127.0.0.1:8765/v1/stream --sessions 50
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from benchmarks.common import (
    REPO,
    RESULTS_DIR,
    RunFailed,
    check_positive,
    count_text,
    prepare_out_dir,
    result_stem,
    run_failed,
    write_result,
)
from benchmarks.server_under_test import (
    SERVER_FLAGS,
    ServerProcess,
    ServerUnderTest,
    add_server_arguments,
    bench_config,
    json_ready,
    server_from_args,
)

#: The text the figures in the docs were measured on.
DEV = REPO.parent / "shared" / "data" / "cased_spoken" / "ted_iwslt_dev2010_cased.txt"
WORDS_PER_SECOND = 2.5
#: The server's flags of ``bench hypotheses`` (and its JSON ``config`` fields): all but the ITN
#: workers (sessions do not ask for itn) and cProfile (not reported).
HYPOTHESIS_SERVER_FLAGS = tuple(f for f in SERVER_FLAGS if f not in ("itn_workers", "profile"))


@dataclass(frozen=True)
class HypothesisLoadConfig:
    """Options of ``bench hypotheses``.

    Attributes:
        server: the server started (not with ``url``); its ``right_context`` and
            ``max_delay_ms`` are what every session asks for.
        url: a running server (``ws://HOST:PORT/v1/stream``) instead of starting one.
        sessions: the steps: N sessions at once each, one step after the other.
        duration_s: seconds of speech per session.
        data: punctuated text, or ``word<TAB>LABEL`` lines.
        seed: session ``k`` of a step draws its offset and chunks from ``seed + k``.
        out_dir, name: where ``<name>.json`` goes.
    """

    server: ServerUnderTest = ServerUnderTest()
    url: str | None = None
    sessions: tuple[int, ...] = (50,)
    duration_s: float = 30.0
    data: Path = DEV
    seed: int = 0
    out_dir: Path = RESULTS_DIR
    name: str = "hypothesis_load"

    def __post_init__(self) -> None:
        if not self.sessions or min(self.sessions) < 1:
            raise ValueError("sessions must be positive counts")
        check_positive(duration_s=self.duration_s)  # NaN and inf too: a schedule must end

    def to_json(self) -> dict:
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "server"}
        return json_ready({**self.server.to_json(HYPOTHESIS_SERVER_FLAGS), **own})


def read_words(path: Path) -> list[str]:
    """The words of punctuated text (converted as training converts it), or of a
    ``word<TAB>LABEL`` file."""
    from streampunct.errors import InputError
    from streampunct.labels import LABELS
    from streampunct.text.word_labels import read_punctuated_text, read_word_labels

    path = Path(path)
    if not path.is_file():
        raise InputError(f"no such file: {path} (pass --data: punctuated text, or word<TAB>LABEL lines)")
    lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    tsv = bool(lines) and all(line.rpartition("\t")[2].strip() in LABELS for line in lines)
    words = (read_word_labels(path) if tsv else read_punctuated_text(path)).words
    if not words:
        raise InputError(f"{path}: no words")
    return list(words)


def events(text: Sequence[str], seed: int, duration: float) -> list:
    """One session's ASR events: from a random offset of ``text``, chunks of 1-4 words at
    2.5 words/s, each preceded by two interim results (its first word 200 ms before the commit,
    the whole chunk 100 ms before), until ``duration`` seconds."""
    from streampunct.client.caption_input import AsrEvent
    from streampunct.core.wire import Word

    rng = random.Random(seed)
    i = rng.randrange(0, max(1, len(text) - 200))
    out, t = [], 1.0
    while t < duration:
        k = rng.randint(1, 4)
        chunk = [text[(i + j) % len(text)] for j in range(k)]
        i, t = i + k, t + k / WORDS_PER_SECOND
        out.append(AsrEvent(t - 0.2, tuple(Word(w) for w in chunk[:1]), interim=True))
        out.append(AsrEvent(t - 0.1, tuple(Word(w) for w in chunk), interim=True))
        out.append(AsrEvent(t, tuple(Word(w) for w in chunk)))
    return out


async def run_step(url: str, n: int, cfg: HypothesisLoadConfig, words: Sequence[str]) -> dict:
    """``n`` caption sessions at once; the p95 margin of each, their median and worst. A session
    that fails (it cannot connect, its stream is lost) is counted in ``failed_sessions`` (by
    error in ``failures``, the first message in ``first_failure``); the others are measured."""
    from streampunct.client.caption import caption
    from streampunct.errors import StreampunctError

    outcomes = await asyncio.gather(*(
        caption(url, events=events(words, cfg.seed + s, cfg.duration_s), right_context=cfg.server.right_context,
                max_delay_ms=cfg.server.max_delay_ms, partials=True)
        for s in range(n)
    ), return_exceptions=True)
    for outcome in outcomes:  # a bug in the bench keeps its traceback
        if isinstance(outcome, BaseException) and not isinstance(outcome, StreampunctError | OSError):
            raise outcome
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    runs = [o for o in outcomes if not isinstance(o, BaseException)]
    p95 = np.array([r.latency.margin[1] for r in runs], dtype=float)
    return {
        "sessions": n, "duration_s": cfg.duration_s,
        "failed_sessions": len(failed),
        "failures": dict(Counter(type(e).__name__ for e in failed)),
        "first_failure": str(failed[0]) if failed else None,
        "words_final": sum(r.transcript.n_final for r in runs),
        "errors": sum(len(r.transcript.errors) for r in runs),
        "p95_margin_ms_median_over_sessions": round(float(np.median(p95)), 1) if p95.size else None,
        "p95_margin_ms_worst_session": round(float(p95.max()), 1) if p95.size else None,
    }


def run_failure(rows: Sequence[dict]) -> str | None:
    """Why the steps measured nothing (None: they did): every session failed, or none of them
    had a word finalized."""
    tried = sum(r["sessions"] for r in rows)
    if all(r["failed_sessions"] == r["sessions"] for r in rows):
        failures: Counter = Counter()
        for r in rows:
            failures.update(r["failures"])
        first = next(r["first_failure"] for r in rows if r["first_failure"])
        return f"every session failed ({tried} tried; {count_text(failures)}): {first}"
    if not any(r["words_final"] for r in rows):
        return f"no word was finalized in any session ({tried} tried; {sum(r['errors'] for r in rows)} errors)"
    return None


def format_step(row: dict) -> str:
    """A step's row as its printed line, as the other benches print theirs (``N=... | ...``)."""
    def ms(x: float | None) -> str:
        return "-" if x is None else f"{x:.0f}"

    failed = f"failed {row['failed_sessions']}"
    if row["failed_sessions"]:
        failed += f" ({count_text(row['failures'])}): {row['first_failure']}"
    return " | ".join([
        f"N={row['sessions']:<4d} words final {row['words_final']}",
        f"p95 margin median/worst session {ms(row['p95_margin_ms_median_over_sessions'])}/"
        f"{ms(row['p95_margin_ms_worst_session'])} ms",
        f"errors {row['errors']}",
        failed,
    ])


async def _steps(url: str, cfg: HypothesisLoadConfig, words: Sequence[str]) -> list[dict]:
    rows = []
    for n in cfg.sessions:
        if rows:
            await asyncio.sleep(1.0)  # let the server settle (sessions closed) between steps
        rows.append(await run_step(url, n, cfg, words))
        print(format_step(rows[-1]), flush=True)
    return rows


def run_hypothesis_load(cfg: HypothesisLoadConfig, *, command: str | None = None) -> dict:
    """Run the steps; write ``<name>.json``; return the payload. A run in which every session
    failed writes nothing and raises :class:`~benchmarks.common.RunFailed`."""
    prepare_out_dir(cfg.out_dir, f"{cfg.name}.json")
    words = read_words(cfg.data)
    started = time.monotonic()
    server: ServerProcess | None = None
    with tempfile.TemporaryDirectory(prefix="streampunct-hypotheses-") as tmp:
        try:
            if cfg.url is None:
                server = ServerProcess(cfg.server, max_sessions=max(cfg.sessions) + 16, workdir=Path(tmp))
                url = server.start()
                print(f"server ready at {url} ({server.engine}, {server.model})", flush=True)
            else:
                url = cfg.url
            rows = asyncio.run(_steps(url, cfg, words))
        finally:
            if server is not None:
                server.stop()
    if all(r["failed_sessions"] == r["sessions"] for r in rows):
        raise RunFailed(run_failure(rows))
    payload = {
        "config": cfg.to_json(),
        "server": {"started": server is not None, "url": None if server else url,
                   "engine": server.engine if server else None, "model": server.model if server else None},
        "runs": rows,
        "total_s": round(time.monotonic() - started, 1),
    }
    path = write_result(cfg.name, payload, cfg.out_dir, command=command)
    print(f"wrote {path}")
    return payload


# -- command line ------------------------------------------------------------------------


def add_hypothesis_arguments(p: argparse.ArgumentParser) -> None:
    from streampunct.commands.argtypes import path_argument, positive_float, positive_int

    d = HypothesisLoadConfig()
    p.add_argument("--url", default=None, help="a running server (ws://HOST:PORT/v1/stream) instead of starting one")
    p.add_argument("--sessions", type=positive_int, nargs="+", default=list(d.sessions), metavar="N",
                   help="steps of N sessions at once, one after the other (default: %(default)s)")
    p.add_argument("--duration", type=positive_float, default=d.duration_s,
                   help="seconds of speech per session (default: %(default)s)")
    p.add_argument("--data", type=path_argument, default=d.data,
                   help="punctuated text or word<TAB>LABEL lines (default: dev2010, %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="session k draws from seed + k (default: %(default)s)")
    p.add_argument("--out-dir", type=path_argument, default=d.out_dir)
    p.add_argument("--name", type=result_stem, default=d.name, help="result file stem (default: %(default)s)")
    add_server_arguments(p.add_argument_group("the server started (not with --url)"), d.server,
                         HYPOTHESIS_SERVER_FLAGS)


def config_from_args(args: argparse.Namespace) -> HypothesisLoadConfig:
    return HypothesisLoadConfig(server=server_from_args(args), url=args.url, sessions=tuple(args.sessions),
                                duration_s=args.duration, data=args.data, seed=args.seed, out_dir=args.out_dir,
                                name=args.name)


def run_hypothesis_from_args(args: argparse.Namespace, *, command: str | None = None) -> int:
    from streampunct.errors import InputError

    cfg = bench_config(config_from_args, args, url_allowed=True)
    try:
        payload = run_hypothesis_load(cfg, command=command)
    except RunFailed as e:
        return run_failed("hypotheses", str(e))
    except RuntimeError as e:
        raise InputError(str(e)) from None
    failure = run_failure(payload["runs"])
    return run_failed("hypotheses", failure) if failure else 0


def main(argv: Sequence[str] | None = None) -> int:
    import sys

    p = argparse.ArgumentParser(prog="python -m benchmarks.hypothesis_load", description=__doc__.split("\n")[0])
    add_hypothesis_arguments(p)
    return run_hypothesis_from_args(p.parse_args(argv),
                                    command="python -m benchmarks.hypothesis_load " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    from benchmarks.common import run_module

    raise SystemExit(run_module(main, "python -m benchmarks.hypothesis_load"))
