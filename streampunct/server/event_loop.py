"""The server's event loop: uvloop where it is installed, else asyncio's own.

``serve --event-loop`` (:class:`EventLoop`, ``ServerConfig.event_loop``) picks it;
:func:`loop_factory` makes it, for the one ``asyncio.Runner`` that runs the
server (:func:`streampunct.server.app.run_server`). ``auto`` takes uvloop when it
imports (it has no Windows build, and none for PyPy), else the standard loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from enum import StrEnum
from types import ModuleType


class EventLoop(StrEnum):
    """``ServerConfig.event_loop`` (``serve --event-loop``): the event loop the server runs on."""

    AUTO = "auto"
    UVLOOP = "uvloop"
    ASYNCIO = "asyncio"


def _uvloop() -> ModuleType | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop


def uvloop_available() -> bool:
    """Whether uvloop imports here."""
    return _uvloop() is not None


def resolve(mode: EventLoop | str) -> EventLoop:
    """The loop ``mode`` means here: ``auto`` becomes ``uvloop`` where it imports, else ``asyncio``.
    Raises ValueError for ``uvloop`` where it does not import."""
    mode = EventLoop(mode)
    if mode is EventLoop.AUTO:
        return EventLoop.UVLOOP if uvloop_available() else EventLoop.ASYNCIO
    if mode is EventLoop.UVLOOP and not uvloop_available():
        raise ValueError("event_loop uvloop: uvloop is not installed (pip install uvloop; there is none for "
                         "Windows); use auto or asyncio")
    return mode


def loop_factory(mode: EventLoop | str = EventLoop.AUTO) -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the loop of ``mode`` (``asyncio.Runner(loop_factory=...)``); ValueError as :func:`resolve`."""
    if resolve(mode) is EventLoop.UVLOOP:
        return _uvloop().new_event_loop
    return asyncio.new_event_loop


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: the kind of ``loop`` (for the startup log)."""
    return "uvloop" if type(loop).__module__.split(".")[0] == "uvloop" else "asyncio"
