"""An engine load that fails while the server is stopping: its error goes nowhere (the stop is
what the server reports), and is no "Task exception was never retrieved" traceback either."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading

from engines.base import EngineError
from streampunct.server.app import ServerConfig, ServerRuntime, StreamServer, run_until_signalled
from tests.streampunct.conftest import TEST_WINDOW


async def test_an_engine_that_fails_to_load_while_the_server_stops_leaves_no_task_error(
    aligner, caplog, monkeypatch
):
    """The stop comes while the engine loads; the load fails once the shutdown has begun (a
    worker of ``serve --workers`` whose neighbour failed to start: the supervisor's SIGTERM comes
    as its own load fails). The loader task's error was retrieved by no one: asyncio logged it
    with a traceback when the task was collected, beside the one error line serve writes."""
    entered, failing = threading.Event(), threading.Event()

    def engine():
        entered.set()
        failing.wait(30)
        raise EngineError("no such engine")

    shutdown = StreamServer._shutdown

    async def shutdown_once_the_load_failed(self):  # the interleaving of the race, every time
        failing.set()
        await asyncio.wait({self._loader})  # (waits without retrieving its error)
        await shutdown(self)

    monkeypatch.setattr(StreamServer, "_shutdown", shutdown_once_the_load_failed)
    stop = asyncio.Event()
    config = ServerConfig(host="127.0.0.1", port=0)
    with caplog.at_level(logging.WARNING):
        serving = asyncio.create_task(
            run_until_signalled(
                config, ServerRuntime(engine, aligner, TEST_WINDOW, model_name="fake"), stop=stop
            )
        )
        await asyncio.wait_for(asyncio.to_thread(entered.wait, 30), 35)
        stop.set()
        assert await asyncio.wait_for(serving, 30) is None
        del serving
        gc.collect()  # the loader task goes with its server: an unretrieved error is logged now
        await asyncio.sleep(0)
    assert "never retrieved" not in caplog.text, caplog.text
    assert (
        "the engine failed to load while the server stopped: "
        "cannot load the onnxruntime engine: no such engine"
    ) in caplog.text


async def test_an_engine_that_fails_to_load_with_no_stop_is_reported_once(aligner, caplog):
    """No stop: the load's error is what ``run_until_signalled`` raises (serve's one error line).
    The shutdown after it does not log it again as a load that failed "while the server
    stopped", which no stop preceded."""
    from streampunct.errors import ModelError

    def engine():
        raise EngineError("no such engine")

    config = ServerConfig(host="127.0.0.1", port=0)
    with caplog.at_level(logging.WARNING):
        try:
            await asyncio.wait_for(
                run_until_signalled(
                    config, ServerRuntime(engine, aligner, TEST_WINDOW, model_name="fake")
                ),
                30,
            )
        except ModelError as e:
            error = str(e)
        else:
            raise AssertionError("the load did not fail")
    assert error == "cannot load the onnxruntime engine: no such engine"
    assert "while the server stopped" not in caplog.text, caplog.text
