"""The ``streampunct`` command line: one entry point, one module per subcommand.

Each subcommand lives in ``streampunct/commands/<name>.py`` and exposes
``NAME``, ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``. A
subcommand is listed only when its module is present, so the CLI never offers
a feature that has not landed. Heavy imports (torch, onnx) happen inside
``run`` so that ``streampunct --help`` stays fast and works on the base install.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys
from collections.abc import Sequence

from streampunct import __version__
from streampunct.errors import StreampunctError

#: Order in which subcommands are listed.
COMMANDS = ("serve", "punctuate", "caption", "build_engine", "train", "evaluate", "bench")


def _available_commands():
    for name in COMMANDS:
        module_name = f"streampunct.commands.{name}"
        if importlib.util.find_spec(module_name) is not None:
            yield importlib.import_module(module_name)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="streampunct",
        description="Real-time punctuation for speech recognition output.",
    )
    parser.add_argument("--version", action="version", version=f"streampunct {__version__}")
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="logging level (default: INFO)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _available_commands():
        p = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args._run(args) or 0)
    except StreampunctError as e:
        print(f"streampunct {args.command}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"streampunct {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
