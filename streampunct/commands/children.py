"""Child processes that die with the process that started them.

A bench's HAProxy and a recipe's trainer must not run on after their parent is killed outright
(SIGKILL, the OOM killer, a closed terminal's SIGHUP). On Linux the child asks the kernel for a
SIGTERM when its parent dies (``prctl(PR_SET_PDEATHSIG)``, kept across exec), checks that the
parent did not die before that call, and then becomes the program. It is done in the child after
exec of this interpreter, not in a ``preexec_fn``: Python run between fork and exec may deadlock
when the parent has threads (an engine's). (``streampunct serve`` started by a bench watches its
parent itself instead: ``STREAMPUNCT_PARENT_PID``, :func:`streampunct.commands.serve.watch_parent`.)
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

_LAUNCHER = f"""import ctypes, os, signal, sys
parent = int(sys.argv[1])
try:
    ctypes.CDLL(None, use_errno=True).prctl({PR_SET_PDEATHSIG}, signal.SIGTERM)
except (OSError, AttributeError):
    pass
if os.getppid() != parent:  # the parent died before the call
    sys.exit(128 + signal.SIGTERM)
try:
    os.execv(sys.argv[2], sys.argv[2:])
except OSError as e:
    sys.exit(f"cannot run {{sys.argv[2]}}: {{e.strerror}}")
"""


def dies_with_parent(argv: Sequence[str]) -> list[str]:
    """``argv`` (a program and its arguments) as a command line that is sent SIGTERM when this
    process dies, however it dies (Linux; elsewhere ``argv`` as it is). Start it from a thread that
    lives as long as the child should: for the kernel the parent is the thread that started it. A
    program name without a folder is looked up on PATH here."""
    if not sys.platform.startswith("linux"):
        return list(argv)
    program = argv[0] if os.sep in argv[0] else (shutil.which(argv[0]) or argv[0])
    return [sys.executable, "-c", _LAUNCHER, str(os.getpid()), program, *argv[1:]]
