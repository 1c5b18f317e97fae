"""The client's bookkeeping (Transcript, LatencyTracker) and its session handling."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streampunct.client.stream_client import ClientError, LatencyTracker, StreamClient, Transcript
from streampunct.core.wire import (
    ConfigRequest,
    Ended,
    Final,
    Flushed,
    Partial,
    PunctuatedWord,
    SessionOptions,
)
from streampunct.labels import COMMA, O


def final(start: int, *pairs: tuple[str, str]) -> Final:
    return Final(start, tuple(PunctuatedWord(w, p) for w, p in pairs), "")


def test_transcript_folds_finals_partials_and_control_messages():
    t = Transcript()
    t.apply(final(0, ("hello", ","), ("world", "")))
    t.apply(Partial(2, (PunctuatedWord("how", ""), PunctuatedWord("are", "?")), ""))
    assert [w.w for w in t.tail] == ["how", "are"]
    t.apply(final(2, ("how", "")))
    assert [w.w for w in t.tail] == ["are"]  # the final covered part of the partial
    t.apply(Flushed(3))
    t.apply(Ended(3))
    assert t.words == ["hello", "world", "how"] and t.labels == [COMMA, O, O]
    assert t.flushed_upto == 3 and t.ended_words == 3
    assert t.text(capitalize=True) == "Hello, world how"


@pytest.mark.parametrize("start", [2, 0], ids=["gap", "repeat"])
def test_transcript_rejects_finals_that_are_not_contiguous(start):
    t = Transcript()
    t.apply(final(0, ("a", "")))
    with pytest.raises(ClientError):
        t.apply(final(start, ("b", ".")))


def test_transcript_rejects_unknown_marks():
    with pytest.raises(ClientError):
        Transcript().apply(final(0, ("a", "!")))


def test_latency_tracker_uses_the_first_condition_that_holds():
    tracker = LatencyTracker(SessionOptions(right_context=2, max_delay_ms=1000))
    tracker.words_sent(["a", "b"], 0.0)
    tracker.words_sent(["--", "c"], 0.5)  # "--" normalizes to nothing: not a word
    tracker.words_sent(["d"], 0.7)
    tracker.flush_sent(0.8)
    tracker.words_sent(["e"], 0.9)
    assert tracker.sent_at == [0.0, 0.0, 0.5, 0.7, 0.9]
    assert tracker.decidable_at(0) == 0.5  # "c" arrived
    assert tracker.decidable_at(1) == 0.7  # "d" arrived
    assert tracker.decidable_at(2) == 0.8  # the flush
    assert tracker.decidable_at(4) == 1.9  # only the delay
    assert tracker.decidable_at(3) == 0.8  # the flush (before the delay, and no word 5)
    tracker.final_received(final(0, ("a", "")), 0.6)
    tracker.final_received(final(1, ("b", ""), ("c", ""), ("d", ".")), 0.85)
    summary = tracker.summary()
    assert summary.words == 4
    assert summary.latency[3] == pytest.approx(850)  # word b: 0.0 -> 0.85
    assert summary.margin[3] == pytest.approx(150)  # word b: decidable at 0.7, final at 0.85
    assert "4 words" in summary.format()


def test_latency_summary_of_nothing_is_nan():
    summary = LatencyTracker(SessionOptions()).summary()
    assert summary.words == 0 and math.isnan(summary.latency[0])


async def test_connect_applies_options_and_reports_refusal(start_server):
    server = await start_server(session_defaults=SessionOptions(right_context=1))
    async with await StreamClient.connect(server.url, max_delay_ms=250, partials=True) as client:
        assert client.options == SessionOptions(1, 250, True, False)
        assert client.session == client.ready.session
    async with await StreamClient.connect(server.url) as client:
        await client.send_words(["x"])
        with pytest.raises(ClientError, match="config refused"):
            await client.configure(ConfigRequest(right_context=3))


async def test_the_documented_client_snippet_runs(start_server, capsys):
    """docs/server.md, "Client": the snippet as written (a script), against a server."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "server.md").read_text(encoding="utf-8")
    code = re.search(r"## Client\n\n```python\n(.*?)```", doc, re.S).group(1)
    assert "asyncio.run(main())" in code
    server = await start_server()
    namespace: dict = {}
    exec(code.replace("ws://127.0.0.1:8765/v1/stream", server.url).replace("asyncio.run(main())", ""), namespace)
    await namespace["main"]()  # (this test already runs in an event loop)
    printed = capsys.readouterr().out.strip()
    assert re.sub(r"[.,?]", "", printed.lower()) == "so how are you"
    assert printed[0] == "S"


async def test_iteration_stops_when_the_server_closes(start_server):
    server = await start_server()
    async with await StreamClient.connect(server.url, right_context=0) as client:
        await client.send_words(["one", "two."])
        await client.end()
        messages = [m async for m in client]
    assert [m.type for m in messages][-1] == "end"
    assert [w.p for m in messages if isinstance(m, Final) for w in m.words][-1] in ("", ",", ".", "?")
    assert client.close_code == 1000


def test_written_forms_keep_the_case_the_server_wrote():
    from streampunct.client.stream_client import written_forms

    def final(text, *words):
        return Final(0, tuple(PunctuatedWord(w, p) for w, p in words), text)

    assert written_forms(final("went to New York,", ("went", ""), ("to", ""), ("new", ""), ("york", ","))) == [
        "went", "to", "New", "York"]
    # clitics are joined to the word before them inside one final
    assert written_forms(final("NASA didn't?", ("nasa", ""), ("did", ""), ("n't", "?"))) == ["NASA", "did", "n't"]
    # words the text does not spell (a lexicon's or ITN's form, another server's rendering) keep
    # the normalized word; the words before and after them keep the case the server wrote
    assert written_forms(final("Went to NY.", ("went", ""), ("to", ""), ("new", ""), ("york", "."))) == [
        "Went", "to", "new", "york"]
    assert written_forms(final("Yesterday, John from NASA flew to NYC with",
                               *[(w, "") for w in "yesterday john from nasa flew to new york city with".split()])) == [
        "Yesterday", "John", "from", "NASA", "flew", "to", "new", "york", "city", "with"]
    assert written_forms(final("It costs $25, Paris", ("it", ""), ("costs", ""), ("twenty", ""), ("five", ""),
                               ("dollars", ","), ("paris", ""))) == ["It", "costs", "twenty", "five", "dollars",
                                                                     "Paris"]
    assert written_forms(final("$25", ("five", ""), ("dollars", ""))) == ["five", "dollars"]
    # a tie between skipping words and skipping tokens goes to the words (a written form is shorter)
    assert written_forms(final("I have 25 And five more", *[(w, "") for w in "i have twenty five and five more".split()])) == [
        "I", "have", "twenty", "five", "And", "five", "more"]
    assert written_forms(final("", ("so", ""))) == ["so"]
    # capitals that change a letter or the length: Turkish dotless i, German sharp s in upper case
    assert written_forms(final("NASA said Irmak.", ("nasa", ""), ("said", ""), ("ırmak", "."))) == [
        "NASA", "said", "Irmak"]
    assert written_forms(final("STRASSE 'Cause", ("straße", ""), ("'cause", ""))) == ["STRASSE", "'Cause"]


@settings(max_examples=300, deadline=None)
@given(words=st.lists(st.sampled_from(["new", "york", "city", "nasa", "did", "n't", "so", "twenty", "five"]),
                      min_size=1, max_size=12),
       text=st.lists(st.sampled_from(["New", "York", "NYC", "$25", "NASA", "didn't", "So,", "so", "five.", "25"]),
                     max_size=12))
def test_written_forms_give_one_form_per_word_that_spells_it(words, text):
    """Whatever the text, each word gets one form, and a form other than the word itself is
    that word written out (its case)."""
    from streampunct.client.stream_client import written_forms

    forms = written_forms(Final(0, tuple(PunctuatedWord(w, "") for w in words), " ".join(text)))
    assert len(forms) == len(words)
    assert all(form == word or form.lower() == word for form, word in zip(forms, words, strict=True))


def test_the_caption_view_and_the_transcript_show_the_learned_case():
    import io

    from streampunct.client.caption import CaptionView

    transcript = Transcript()
    transcript.apply(Final(0, (PunctuatedWord("we", ""), PunctuatedWord("met", ""), PunctuatedWord("john", "")),
                           "We met John"))
    transcript.apply(Final(3, (PunctuatedWord("at", ""), PunctuatedWord("nasa", "."), PunctuatedWord("it", "")),
                           "at NASA. It"))
    out = io.StringIO()
    view = CaptionView(out, live=False, capitalize=True)
    view.update(transcript)
    assert out.getvalue() == "We met John at NASA.\n"
    assert transcript.text(capitalize=True) == "We met John at NASA. It"
    assert transcript.text() == "we met john at nasa. it"
    # the view shows the text as the server sent it (its case is the session's capitalize)
    plain = io.StringIO()
    CaptionView(plain, live=False, capitalize=False).update(transcript)
    assert plain.getvalue() == "We met John at NASA.\n"


async def test_the_message_tap_sees_a_send_before_it_goes_out():
    """caption --json logs what the tap sees: a send held by backpressure must not be logged
    after the server's answer to it."""
    from streampunct.core.wire import FlushRequest, Ready

    seen: list[str] = []

    class Connection:
        async def send(self, frame):
            seen.append(f"wire {frame}")

    client = StreamClient(Connection(), Ready("s1", "m", SessionOptions()),
                          on_message=lambda direction, message: seen.append(f"tap {direction} {message.type}"))
    await client.send(FlushRequest())
    assert seen == ["tap send flush", 'wire {"type":"flush"}']
