"""``serve --workers N``: which stop signals a worker takes for a second stop (one that cuts its
drain short), and what a worker that fails to start while a stop comes writes to stderr.

Helpers and the slow engine are those of ``test_server_workers``.
"""

from __future__ import annotations

import asyncio
import os
import signal

from tests.streampunct.fakes import until
from tests.streampunct.test_server_workers import (
    SLOW_ENGINE,
    WORDS,
    pending_stream,
    read_to_close,
    serving,
)


async def test_a_service_stop_after_a_worker_died_still_drains_the_others(tmp_path):
    """A worker dies: the supervisor drains the others by itself (SIGTERM). That stop is the
    supervisor's, not an operator's: the service manager's one SIGTERM to every process then
    (the supervisor, which passes it on, and the survivor itself) is the first stop the survivor
    is asked for, and it drains on. Before, the supervisor's own stop counted as one passed on,
    so the survivor took the service's stop for a second one and closed its client with none of
    its words final."""
    from streampunct.server.app import DRAIN_CUT_SHORT_REASON

    async with serving(tmp_path, *SLOW_ENGINE) as server:
        await server.ready_line()
        health = await server.workers_by_health(2)
        client = await pending_stream(server, 1)
        os.kill(health[0]["pid"], signal.SIGKILL)
        await until(lambda: "SIGTERM received; shutting down" in server.log.read_text(), timeout=10)
        # systemd's KillMode=control-group: the survivor itself...
        os.kill(health[1]["pid"], signal.SIGTERM)
        server.proc.send_signal(signal.SIGTERM)  # ...and the supervisor, which passes it on
        transcript = await read_to_close(client)
        log = server.log.read_text()
        assert client.close_reason != DRAIN_CUT_SHORT_REASON, log
        assert transcript.words == WORDS, log
        assert (client.close_code, client.close_reason) == (1001, "server shutting down")
        assert await asyncio.wait_for(server.proc.wait(), 30) == 1  # a worker died
        log = server.log.read_text()
        assert "received again: closing" not in log, log
        # the two signals it got after: two, or one where both came before its handler ran (a
        # standard signal pending twice is delivered once)
        assert log.count("the same stop as the first") in (1, 2), log


def test_the_supervisors_own_stops_count_toward_no_second_stop():
    """What a worker takes for a second stop, given the stops the supervisor passed on, those it
    sent on its own (a worker died) and the signals the worker received in all."""
    from ctypes import c_int

    from streampunct.server.workers import _asks_twice

    died = c_int(1)  # the supervisor drained the others by itself
    assert not _asks_twice(c_int(1), died, 2)  # then Ctrl-C once: passed on
    assert not _asks_twice(c_int(1), died, 3)  # then systemd's stop: passed on, and its own
    assert _asks_twice(c_int(2), died, 3)  # then Ctrl-C twice
    assert _asks_twice(c_int(0), died, 3)  # then a kill of the worker, twice
    assert not _asks_twice(c_int(1), c_int(0), 2)  # no worker died: systemd's stop is one
    assert _asks_twice(c_int(2), c_int(0), 2)
