"""Every model folder shipped in ``models/`` loads, serves and punctuates plain English.

These run on the real shipped weights (no data set needed): each folder must
load through the engine registry, carry a consistent ``streampunct.json``, and
get the easy cases right, offline and through the server.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from engines.sidecar import read_sidecar

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.parent for p in (REPO / "models").glob("*/streampunct.json"))

pytestmark = pytest.mark.slow

TEXT = ("so i went to the store and bought some milk then i came home what did you do "
        "today i think we should talk about the plan for next week")


def test_default_and_base_are_shipped():
    assert {p.name for p in SHIPPED} >= {"default", "base"}, SHIPPED


@pytest.fixture(scope="module", params=SHIPPED, ids=[p.name for p in SHIPPED])
def punctuator(request):
    pytest.importorskip("onnxruntime")
    from streampunct.core.decoder import OfflineDecoder

    p = OfflineDecoder.from_model_dir(request.param)
    yield request.param, p
    p.close()


def test_folder_is_complete(punctuator):
    model_dir, _ = punctuator
    info = json.loads((model_dir / "streampunct.json").read_text())
    assert info["labels"][:1] == ["O"] and {"COMMA", "PERIOD", "QUESTION"} <= set(info["labels"])
    graphs = sorted(model_dir.glob("model*.onnx"))
    named = {info["artifact"], info.get("stream_artifact", info["artifact"])}  # may be one graph (models/base)
    assert {g.name for g in graphs} == named, graphs  # nothing shipped that is not used
    for graph in graphs:
        assert (model_dir / f"{graph.name}.json").is_file()
        assert read_sidecar(graph).source_sha256 == read_sidecar(model_dir / info["artifact"]).source_sha256
    assert (model_dir / "tokenizer.json").is_file()
    assert (model_dir / "MODEL_CARD.md").is_file()


def test_punctuates_plain_english(punctuator):
    _, p = punctuator
    out = p.punctuate_text(TEXT, capitalize=True)
    # the question is found, the text ends a sentence, and the output is capitalized
    assert out.startswith("So I went"), out
    assert "What did you do?" in out or "What did you do today?" in out, out
    assert out.endswith("week."), out


async def test_question_at_end_of_stream_through_the_server(punctuator):
    model_dir, _ = punctuator
    from streampunct.client.stream_client import StreamClient, Transcript
    from streampunct.server.app import ServerConfig, serve

    server = await serve(ServerConfig(model_dir=model_dir, port=0))
    try:
        await asyncio.wait_for(server.wait_ready(), 120)
        async with await StreamClient.connect(server.url, right_context=2) as client:
            transcript = Transcript()
            await client.send_words("what is your name".split())
            await client.end()
            async for message in client:
                transcript.apply(message)
    finally:
        await server.shutdown()
    assert transcript.words == ["what", "is", "your", "name"]
    assert transcript.ended_words == 4
    assert [w.p for w in transcript.final_words][-1] == "?"


def test_a_case_margin_is_the_choice_of_its_tuning(punctuator):
    """``case_margin`` (the case head's margin for capitals) is what training.case_margin chose
    on validation, and the punctuator serves with it; a folder without one serves the argmax."""
    model_dir, p = punctuator
    info = json.loads((model_dir / "streampunct.json").read_text())
    if "case_margin" not in info:
        assert p.case_margin == 0.0
        return
    tuning = info["case_margin_tuning"]
    assert info["case_margin"] == tuning["chosen"] == p.case_margin
    best = max(row["mean_mid_sentence_f1"] for row in tuning["grid"])
    assert min(r["margin"] for r in tuning["grid"] if r["mean_mid_sentence_f1"] == best) == tuning["chosen"]


def test_no_sentence_start_capital_after_a_word_without_a_sentence_mark(punctuator):
    """A user's live caption: "is there anything else Alright then" (issue 37)."""
    _, p = punctuator
    out = p.punctuate_text("is there anything else alright then let us go", capitalize=True)
    assert out.startswith("Is there anything else") and "else Alright" not in out, out
