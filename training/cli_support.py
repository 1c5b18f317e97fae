"""What every ``python -m training.X`` tool does around its work: log to stderr at INFO,
and turn the errors a user can fix into one line and exit code 2."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from streampunct.errors import StreampunctError


def run_tool(action: Callable[[], object]) -> int:
    """Run ``action`` with logging set up; 0 when it returns, 2 with ``error: ...`` on
    stderr when it raises a :class:`~streampunct.errors.StreampunctError` (InputError,
    ModelError, ...). Other exceptions are bugs and keep their traceback."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        action()
    except StreampunctError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0
