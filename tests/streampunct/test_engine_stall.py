"""An engine call that does not return (``serve --engine-stall-timeout-s``): ``/healthz`` says so."""

from __future__ import annotations

import json
import logging
import math

import pytest

from streampunct.client.stream_client import StreamClient
from streampunct.core.wire import Final
from streampunct.server.batcher import BatcherConfig
from tests.streampunct.fakes import GatedEngine, until
from tests.streampunct.test_server_hardening import TIMEOUT, rejected, request
from tests.streampunct.test_server_protocol import WORDS

STALL_S = 0.3  # the test's stall timeout: a gated call outlives it; waits are on events and states


def stalled_gauge(server) -> float | None:
    return server.metrics.registry.get_sample_value("streampunct_engine_stalled")


def batcher_lines(caplog, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "streampunct.server.batcher" and r.levelno == level
    ]


async def test_a_call_past_the_stall_timeout_turns_healthz_503_stalled_until_it_returns(
    start_server, caplog
):
    caplog.set_level(logging.INFO)
    engine = GatedEngine(open=True)  # open for the warm-up, which is not watched
    server = await start_server(engine=engine, batching=BatcherConfig(stall_timeout_s=STALL_S))
    health = await request(server.port)
    assert health.status == 200 and json.loads(health.body)["status"] == "ok"
    assert json.loads(health.body)["stalled_s"] is None and stalled_gauge(server) == 0.0
    engine.close_gate()
    entered = engine.entered
    client = await StreamClient.connect(server.url, right_context=0, max_delay_ms=600_000)
    try:
        await client.send_words(WORDS[:3])
        await engine.wait_entered(entered + 1)  # its window is in the engine, which holds it
        await until(lambda: server.batcher.engine_stalled, timeout=TIMEOUT)
        health = await request(server.port)
        body = json.loads(health.body)
        assert health.status == 503 and body["status"] == "stalled" and body["stalled_s"] >= STALL_S
        assert stalled_gauge(server) == 1.0
        refused = await request(server.port, "GET", "/v1/stream", websocket=True)
        assert refused.status == 503 and refused.body == b"not serving (the engine is stalled)\n"
        assert rejected(server, "unavailable") == 1.0
        (line,) = batcher_lines(caplog, logging.ERROR)  # once, however often /healthz asks
        assert (
            line.startswith("engine stalled: a call has run for ")
            and '/healthz answers 503 "stalled"' in line
        )
        assert (
            await request(server.port, "GET", "/metrics")
        ).status == 200  # liveness is unchanged
    finally:
        engine.open()
    finals = []
    async for message in client:
        if isinstance(message, Final):
            finals.append(message)
            break
    assert finals  # the call returned: the answer came
    health = await request(server.port)
    body = json.loads(health.body)
    assert health.status == 200 and body["status"] == "ok" and body["stalled_s"] is None
    assert stalled_gauge(server) == 0.0
    (line,) = batcher_lines(caplog, logging.WARNING)
    assert line.startswith("engine call returned after ") and line.endswith(
        "; the engine is no longer stalled"
    )
    await client.close()


@pytest.mark.parametrize(
    "value, message",
    [
        (0, "stall_timeout_s must be > 0 (None: never)"),
        (-1.0, "stall_timeout_s must be > 0 (None: never)"),
        (math.nan, "stall_timeout_s must be a finite number, not nan"),
    ],
)
def test_the_stall_timeout_is_checked(value, message):
    with pytest.raises(ValueError, match=f"^{message.replace('(', '[(]').replace(')', '[)]')}$"):
        BatcherConfig(stall_timeout_s=value)


def test_serve_takes_the_stall_timeout_and_0_for_never():
    from streampunct.cli import build_parser
    from streampunct.commands.serve import build_config

    assert build_config(build_parser().parse_args(["serve"])).batching.stall_timeout_s == 30.0
    config = build_config(build_parser().parse_args(["serve", "--engine-stall-timeout-s", "2.5"]))
    assert config.batching.stall_timeout_s == 2.5
    assert (
        build_config(
            build_parser().parse_args(["serve", "--engine-stall-timeout-s", "0"])
        ).batching.stall_timeout_s
        is None
    )
