"""The Python API (streampunct.api): in-process streams give a real server's finals for
the same schedule; time is the caller's ``now``; the documented snippet runs."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streampunct.api import Punctuator, Stream
from streampunct.core.options import SessionOptions
from streampunct.core.wire import Final, ProtocolError, Word, decode
from streampunct.errors import EngineFailedError, InputError, ModelError
from streampunct.evaluation.accuracy import Event, schedule_labels
from streampunct.labels import ID_TO_MARK
from streampunct.model import DEFAULT_MODEL_DIR
from streampunct.text.normalize import join_texts
from tests.streampunct.conftest import (
    SCHEDULE_VOCAB,
    TEST_WINDOW,
    FakeEngine,
    normalized,
    random_schedule,
)
from tests.streampunct.test_stream_cache import SHAPE, FakeStreamEngine

REPO = Path(__file__).resolve().parents[2]
NO_DELAY = 600_000  # the protocol's largest max_delay_ms: no word is decided by the clock


async def served_finals(url: str, events, **options) -> list[Final]:
    """The finals a server sends for ``events`` (sent as fast as the socket takes them)."""
    from streampunct.client.stream_client import StreamClient

    client = await StreamClient.connect(url, **options)
    for event in events:
        if event.kind == "words":
            await client.send_words(list(event.words))
        elif event.kind == "flush":
            await client.flush()
        else:
            await client.end()
    return [m async for m in client if isinstance(m, Final)]


def played(stream: Stream, events) -> list[Final]:
    """The same schedule pushed into an in-process stream, at the events' times."""
    finals: list[Final] = []
    for event in events:
        if event.kind == "words":
            finals += stream.push(list(event.words), now=event.time)
        elif event.kind == "flush":
            finals += stream.flush(now=event.time)
        else:
            finals += stream.end(now=event.time)
    return finals


def as_tuples(finals: list[Final]) -> list[tuple]:
    return [(f.start, tuple((w.w, w.p) for w in f.words), f.text) for f in finals]


# -- a real server on loopback, the same schedules ------------------------------------


async def test_streams_give_the_servers_finals_with_whole_windows(start_server, aligner):
    engine = FakeEngine()
    server = await start_server(engine=engine)
    punctuator = Punctuator.from_engine(engine, aligner, window=TEST_WINDOW)
    rng = random.Random(3)
    for k in range(8):
        events, rc = random_schedule(rng), k % 5
        options = {"right_context": rc, "max_delay_ms": NO_DELAY, "capitalize": bool(k % 2)}
        served = await served_finals(server.url, events, **options)
        local = played(punctuator.stream(**options), events)
        assert as_tuples(local) == as_tuples(served), f"schedule {k}, right_context {rc}"
        assert [w.w for f in local for w in f.words] == [w for e in normalized(events) for w in e.words]


async def test_streams_give_the_servers_finals_with_cached_left_context(aligner):
    from streampunct.server.app import ServerConfig, ServerRuntime, serve

    engine = FakeStreamEngine()
    server = await serve(ServerConfig(host="127.0.0.1", port=0),
                         ServerRuntime(lambda: engine, aligner, TEST_WINDOW, "fake-stream", stream_shape=SHAPE))
    try:
        await server.wait_ready()
        punctuator = Punctuator.from_engine(engine, aligner, window=TEST_WINDOW, stream_engine=engine)
        assert punctuator.stream_cache
        rng = random.Random(11)
        for k in range(6):
            events, rc = random_schedule(rng), 1 + k % 4
            options = {"right_context": rc, "max_delay_ms": NO_DELAY, "capitalize": bool(k % 2)}
            served = await served_finals(server.url, events, **options)
            local = played(punctuator.stream(**options), events)
            assert as_tuples(local) == as_tuples(served), f"schedule {k}, right_context {rc}"
            # and the simulation's labels (which a cache changes: see test_stream_cache)
            expected = schedule_labels(normalized(events), aligner, TEST_WINDOW, engine.infer,
                                       SessionOptions(right_context=rc, max_delay_ms=NO_DELAY), stream_engine=engine)
            assert [w.p for f in local for w in f.words] == [ID_TO_MARK[x] for x in expected]
        assert any(c > 0 for _, _, c in engine.calls)  # the cached path was taken
    finally:
        await server.shutdown()


@pytest.fixture(scope="module")
def shipped() -> Punctuator:
    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL_DIR}")
    pytest.importorskip("onnxruntime")
    p = Punctuator.load()
    yield p
    p.close()


@pytest.mark.slow
async def test_the_shipped_model_streams_as_the_server_does(shipped):
    """The default server (cached left context, int8 windows alone) and Punctuator.load()
    give the same finals for 400 test2011 words in chunks of 1-4 with two flushes."""
    from streampunct.server.app import ServerConfig, serve
    from streampunct.server.batcher import BatcherConfig
    from streampunct.text.word_labels import read_word_labels

    assert shipped.stream_cache
    words = read_word_labels(REPO / "data" / "iwslt2011" / "test2011").words[:400]
    rng = random.Random(5)
    events, i, t = [], 0, 0.0
    while i < len(words):
        n = rng.randint(1, 4)
        t += 0.4
        events.append(Event(t, tuple(words[i:i + n])))
        i += n
        if len(events) in (30, 75):
            events.append(Event(t, kind="flush"))
    events.append(Event(t + 1, kind="end"))
    # One session: its windows go to the engine one at a time, and no other can join their
    # batch, so a batching wait (5 ms a window by default) would only idle.
    batching = BatcherConfig(max_wait_ms=0)
    server = await serve(ServerConfig(model_dir=DEFAULT_MODEL_DIR, port=0, batching=batching))
    try:
        await server.wait_ready()
        for rc, capitalize in ((3, True), (1, False)):
            options = {"right_context": rc, "max_delay_ms": NO_DELAY, "capitalize": capitalize}
            served = await served_finals(server.url, events, **options)
            local = played(shipped.stream(**options), events)
            assert sum(len(f.words) for f in local) == len(words)
            assert as_tuples(local) == as_tuples(served), f"right_context {rc}"
    finally:
        await server.shutdown()


@pytest.mark.slow
def test_the_documented_snippet(shipped):
    p = Punctuator.load()  # as written: the shipped model
    try:
        assert p.punctuate("hello how are you i am fine") == "Hello. How are you? I am fine."
        s = p.stream(right_context=3, max_delay_ms=2000)
        finals = s.push(["hello", "how", "are", "you"])
        finals += s.end()
        assert [f.text for f in finals] == ["Hello.", "How are you?"]
        assert [(f.start, [w.w for w in f.words]) for f in finals] == [(0, ["hello"]), (1, ["how", "are", "you"])]
    finally:
        p.close()


@pytest.mark.slow
def test_the_readmes_python_block_prints_what_its_comments_say(shipped, capsys):
    """README.md's "In Python" block, run as written: each print shows its line's comment."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    block = readme.split("## In Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    expected = [m.group(1) for m in re.finditer(r"^print\(.*\)\s+# (.+)$", block, re.M)]
    assert len(expected) == 2
    exec(compile(block, "README.md", "exec"), {})
    assert capsys.readouterr().out.splitlines() == expected


def test_punctuate_is_the_punctuate_commands_decoder(shipped):
    from streampunct.commands.punctuate import punctuate_lines
    from streampunct.text.normalize import normalize_words

    text = "so um we went there and it was great wasn't it and then the NASA people came"
    words = normalize_words(text.split())
    assert shipped.punctuate(text) == punctuate_lines([words], shipped._decoder, capitalize=True)[0]
    assert shipped.punctuate(text, capitalize=False) == punctuate_lines([words], shipped._decoder)[0]
    assert shipped.punctuate(words) == shipped.punctuate(text)
    assert shipped.punctuate(" ,. ") == ""
    # symbol words (emoji) as the command writes them: kept in place, unmarked, unseen by the model
    from streampunct.text.normalize import offline_tokens

    emoji = "pizza 🍕 ok hello 😀 there"
    assert shipped.punctuate(emoji) == punctuate_lines([offline_tokens(emoji.split())[0]], shipped._decoder,
                                                       capitalize=True)[0]
    assert "🍕" in shipped.punctuate(emoji) and "😀" in shipped.punctuate(emoji.split())
    assert shipped.punctuate("🍕") == "🍕"


def test_an_engine_that_does_not_declare_its_capabilities_is_refused_by_name(aligner):
    class Bare:
        def infer(self, input_ids, attention_mask):
            raise AssertionError("not called")

    with pytest.raises(InputError, match=r"engine \(Bare\) does not declare name, has_case, rows_independent"):
        Punctuator.from_engine(Bare(), aligner, window=TEST_WINDOW)
    with pytest.raises(InputError, match=r"engine \(NoneType\) does not declare infer"):
        Punctuator.from_engine(None, aligner)
    with pytest.raises(InputError, match=r"stream engine \(FakeEngine\) does not declare infer_stream"):
        Punctuator.from_engine(FakeEngine(), aligner, stream_engine=FakeEngine())


# -- time -----------------------------------------------------------------------------


def test_a_word_is_final_when_its_delay_runs_out_on_the_callers_clock(aligner):
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    s = p.stream(right_context=3, max_delay_ms=2000)
    assert s.push(["the", "xylophone"], now=10.0) == []
    assert s.next_deadline == pytest.approx(12.0)
    assert s.poll(now=11.999) == []
    finals = s.poll(now=12.0)
    assert [w.w for f in finals for w in f.words] == ["the", "xylophone"]
    assert s.next_deadline is None and s.end(now=13.0) == []


def test_a_late_call_gives_the_labels_of_a_call_on_time(aligner):
    """Labels depend on the schedule: a deadline passed before a push decides its words as
    of the deadline, without the words of that push."""
    p = Punctuator.from_engine(FakeStreamEngine(), aligner, window=TEST_WINDOW,
                               stream_engine=FakeStreamEngine())
    on_time = p.stream(right_context=3, max_delay_ms=1000)
    late = p.stream(right_context=3, max_delay_ms=1000)
    first, second = ["so", "what", "is", "it"], ["okay", "yeah", "um", "the"]
    a = on_time.push(first, now=0.0) + on_time.poll(now=1.0) + on_time.push(second, now=5.0) + on_time.end(now=6.0)
    b = late.push(first, now=0.0) + late.push(second, now=5.0) + late.end(now=6.0)
    assert as_tuples(a) == as_tuples(b)
    assert [len(f.words) for f in b] == [1, 3, 1, 3]  # right context, then the deadline; twice


def test_an_emoji_with_its_variation_selector_takes_no_index_and_no_sentence_capital(aligner):
    """"❤️" (U+2764 U+FE0F) and "™" are symbol words: no index, so "hello" opens the sentence;
    the text shows them before it. The last "™" comes after "love" is final: the end shows it
    in a final of no words."""
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    s = p.stream(right_context=0, max_delay_ms=NO_DELAY)
    finals = s.push(["\u2764\ufe0f", "™", "hello", "love\u2764\ufe0f", "\u2122"], now=0.0) + s.end(now=0.1)
    assert [w.w for f in finals for w in f.words] == ["hello", "love"]
    assert [f.start for f in finals][0] == 0
    assert finals[0].text.startswith("\u2764\ufe0f ™ Hello")
    assert (finals[-1].start, finals[-1].words, finals[-1].text) == (2, (), "\u2122")


def test_a_now_earlier_than_one_given_counts_as_that_one(aligner):
    """Time never goes back: a push at 5.0 after one at 10.0 arrives at 10.0, so its words'
    deadlines are 12.0, as on the server's monotonic clock."""
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    s = p.stream(right_context=5, max_delay_ms=2000)
    assert s.push(["the"], now=10.0) == []
    assert s.push(["xylophone"], now=5.0) == []
    assert s.next_deadline == pytest.approx(12.0)
    assert s.poll(now=7.0) == []  # 7.0 is 10.0 here: nothing is due before 12.0
    assert [w.w for f in s.poll(now=12.0) for w in f.words] == ["the", "xylophone"]


def test_the_default_clock_is_monotonic_and_can_be_replaced(aligner):
    ticks = iter([100.0, 100.5, 103.0])
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    s = p.stream(right_context=5, max_delay_ms=2000, clock=lambda: next(ticks))
    assert s.push("the xylophone") == []  # at 100.0
    assert s.poll() == []  # 100.5
    assert [w.w for f in s.poll() for w in f.words] == ["the", "xylophone"]  # 103.0


# -- the stream's contract --------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=st.lists(st.lists(st.sampled_from(SCHEDULE_VOCAB + ["?!", "I'm"]), max_size=5), max_size=12),
       rc=st.integers(0, 4), delay=st.integers(0, 3000), flushes=st.sets(st.integers(0, 11)))
def test_every_word_is_final_once_in_order(aligner, chunks, rc, delay, flushes):
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    s = p.stream(right_context=rc, max_delay_ms=delay)
    finals, t = [], 0.0
    for k, chunk in enumerate(chunks):
        t += 0.7
        finals += s.push(chunk, now=t)
        if k in flushes:
            finals += s.flush(now=t)
    finals += s.end(now=t + 0.1)
    from streampunct.text.normalize import normalize_words

    pushed = normalize_words(w for c in chunks for w in c)
    assert [w.w for f in finals for w in f.words] == pushed
    starts = [f.start for f in finals]
    assert starts == [sum(len(f.words) for f in finals[:k]) for k in range(len(finals))]
    assert s.n_final == s.n_words == len(pushed) and s.ended
    with_words = [k for k, c in enumerate(chunks) if normalize_words(c)]
    if with_words:  # the end ends a sentence unless the last word was already decidable
        last = with_words[-1]
        waited = t + 0.1 - 0.7 * (last + 1)
        if rc > 0 and delay / 1000 > waited and not any(k >= last for k in flushes if k < len(chunks)):
            assert finals[-1].words[-1].p in ".?"


def test_word_times_are_echoed_and_partials_label_the_tail(aligner):
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW, capitalize=False)
    s = p.stream(right_context=2, max_delay_ms=NO_DELAY, partials=True)
    assert s.push([Word("the", 0.0, 0.2), Word("okay", 0.2, 0.5)], now=0.0) == []
    assert s.partial is not None and [w.w for w in s.partial.words] == ["the", "okay"]
    s.hypothesis(["so"], now=0.1)
    assert [w.w for w in s.partial.hypothesis] == ["so"]
    finals = s.push(["yeah", "um"], now=0.2) + s.end(now=0.3)
    assert [(w.w, w.start, w.end) for f in finals for w in f.words][:2] == [("the", 0.0, 0.2), ("okay", 0.2, 0.5)]


def test_bad_input_is_refused_in_one_line(aligner, tmp_path):
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    s = p.stream()
    with pytest.raises(InputError, match="a word must be a str"):
        s.push(["ok", 3])
    with pytest.raises(InputError, match="a word must be a str"):
        p.punctuate(["ok", None])
    s.end(now=0.0)
    with pytest.raises(InputError, match="the stream has ended"):
        s.push(["more"])
    with pytest.raises(ModelError, match="does not exist"):
        Punctuator.load(tmp_path / "nothing")
    with pytest.raises(InputError, match="stream_cache must be one of auto, on, off"):
        Punctuator.load(stream_cache="sometimes")


def test_a_relative_path_to_a_shipped_model_from_elsewhere_names_where_it_is(tmp_path, monkeypatch):
    """The README's ``Punctuator.load("models/base")`` run outside the checkout."""
    monkeypatch.chdir(tmp_path)
    shipped = DEFAULT_MODEL_DIR.parent / DEFAULT_MODEL_DIR.name
    if not (shipped / "streampunct.json").is_file():
        pytest.skip("no shipped model in this checkout")
    with pytest.raises(ModelError) as e:
        Punctuator.load(Path("models") / DEFAULT_MODEL_DIR.name)
    assert str(e.value) == (f"model folder models/{DEFAULT_MODEL_DIR.name} does not exist in {tmp_path}; "
                            f"the shipped model of that name is {shipped}")


def test_an_install_without_the_shipped_model_says_how_to_name_one(tmp_path, monkeypatch):
    """A wheel holds no models/ folder: the default's error says where models are and how to give one."""
    import streampunct.model as model_module

    monkeypatch.delenv("STREAMPUNCT_MODEL", raising=False)
    monkeypatch.setattr(model_module, "DEFAULT_MODEL_DIR", tmp_path / "site-packages" / "models" / "default")
    with pytest.raises(ModelError) as e:
        Punctuator.load()
    assert str(e.value) == (f"model folder {tmp_path}/site-packages/models/default does not exist (the shipped "
                            "model: the models are in the repository's models/ folder, not in an installed "
                            "package; give a model folder with --model or STREAMPUNCT_MODEL)")


def test_streampunct_model_is_read_when_a_model_is_loaded_and_empty_is_unset(tmp_path, monkeypatch):
    """Set after import, $STREAMPUNCT_MODEL still names the default; an empty value is the
    shipped model, not the current folder."""
    from streampunct.model import DEFAULT_MODEL_DIR, default_model_dir

    monkeypatch.setenv("STREAMPUNCT_MODEL", str(tmp_path / "gone"))
    with pytest.raises(ModelError, match=r"gone does not exist \(from STREAMPUNCT_MODEL; unset it"):
        Punctuator.load()
    monkeypatch.setenv("STREAMPUNCT_MODEL", "")
    assert default_model_dir() == DEFAULT_MODEL_DIR


def test_a_model_folder_under_home_is_found_from_a_tilde(tmp_path, monkeypatch):
    """``Punctuator.load("~/m")`` and ``STREAMPUNCT_MODEL=~/m`` (quoted, so no shell expanded it)
    name the folder under the home folder, not a folder called "~"."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError) as e:
        Punctuator.load("~/m")
    assert str(e.value).startswith(f"model folder {tmp_path / 'm'} does not exist")
    monkeypatch.setenv("STREAMPUNCT_MODEL", "~/m")
    from streampunct.model import default_model_dir

    assert default_model_dir() == tmp_path / "m"
    shipped = DEFAULT_MODEL_DIR.parent / DEFAULT_MODEL_DIR.name
    if (shipped / "streampunct.json").is_file():
        (tmp_path / "m").symlink_to(shipped)
        assert Punctuator.load("~/m").name == Punctuator.load(shipped).name


@pytest.mark.parametrize("folder", [5, ["models/default"]])
def test_a_model_folder_that_is_not_a_path_is_a_model_error(folder):
    with pytest.raises(ModelError, match=f"a model folder is a path, not {type(folder).__name__}"):
        Punctuator.load(folder)


@pytest.mark.parametrize(("options", "message"), [
    ({"right_context": "3"}, "'right_context' must be an integer between 0 and 1000"),
    ({"right_context": -1}, "'right_context' must be between 0 and 1000, not -1"),
    ({"right_context": True}, "'right_context' must be an integer between 0 and 1000"),
    ({"max_delay_ms": 10**9}, "'max_delay_ms' must be between 0 and 600000, not 1000000000"),
    ({"max_delay_ms": 2.5}, "'max_delay_ms' must be an integer between 0 and 600000"),
])
def test_stream_options_are_checked_against_the_servers_limits(aligner, options, message):
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    with pytest.raises(InputError) as caught:
        p.stream(**options)
    assert str(caught.value) == message


def test_stream_options_at_the_servers_limits_are_taken(aligner):
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    s = p.stream(right_context=0, max_delay_ms=600_000)
    assert (s.options.right_context, s.options.max_delay_ms) == (0, 600_000)
    s = p.stream(right_context=1000, max_delay_ms=0)
    assert (s.options.right_context, s.options.max_delay_ms) == (1000, 0)
    assert (p.stream().options.right_context, p.stream().options.max_delay_ms) == (3, 2000)


def test_words_that_are_not_text_are_refused_with_what_to_do(aligner):
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    s = p.stream()
    with pytest.raises(InputError) as caught:
        p.punctuate(None)
    assert str(caught.value) == "text must be a str or an iterable of words, not None"
    with pytest.raises(InputError) as caught:
        s.push(None)
    assert str(caught.value) == "words must be a str or an iterable of words, not None"
    with pytest.raises(InputError, match="words must be a str or an iterable of words, not int"):
        s.hypothesis(7)
    with pytest.raises(InputError) as caught:
        p.punctuate(b"hello world")
    assert str(caught.value) == ("text must be a str, not bytes: bytes are not text, decode them first "
                                 "(e.g. data.decode('utf-8'))")
    with pytest.raises(InputError, match="words must be a str, not bytearray: bytes are not text"):
        s.push(bytearray(b"hello"))
    assert s.n_words == 0
    assert p.punctuate(iter(["hello", "world"])) == p.punctuate("hello world") != ""


def test_an_engine_failure_raises_and_the_stream_goes_on(aligner):
    engine = FakeEngine(fail_token=aligner.word_ids("xylophone")[-1])
    p = Punctuator.from_engine(engine, aligner, window=TEST_WINDOW)
    s = p.stream(right_context=0, max_delay_ms=NO_DELAY)
    assert [w.w for f in s.push(["the"], now=0.0) for w in f.words] == ["the"]
    with pytest.raises(EngineFailedError, match="injected engine failure"):
        s.push(["xylophone"], now=1.0)
    engine.fail_token = None  # the engine recovers: the failed window is asked for again
    assert [w.w for f in s.poll(now=2.0) for w in f.words] == ["xylophone"]


def _indices(finals) -> list[int]:
    return [f.start + i for f in finals for i in range(len(f.words))]


def test_finals_made_before_a_failure_in_the_same_call_come_with_the_next_call(aligner):
    """One push decides many windows; the first ones run, a later one fails. The finals of the
    ones that ran are not lost: the next call returns them first, then the rest, each word once."""
    engine = FakeEngine(fail_token=aligner.word_ids("xylophone")[-1])
    s = Punctuator.from_engine(engine, aligner, window=TEST_WINDOW).stream(right_context=2, max_delay_ms=NO_DELAY)
    words = ["the"] * 200 + ["xylophone"] + ["the"] * 5
    with pytest.raises(EngineFailedError, match="injected engine failure"):
        s.push(words, now=0.0)
    assert s.n_final > 100  # windows before the failing one ran: their words are final, not yet returned
    engine.fail_token = None
    got = s.poll(now=1.0) + s.end(now=2.0)
    assert _indices(got) == list(range(len(words)))
    assert [w.w for f in got for w in f.words] == words


def test_an_engine_failure_in_end_leaves_the_stream_to_finish(aligner):
    engine = FakeEngine(fail_token=aligner.word_ids("xylophone")[-1])
    s = Punctuator.from_engine(engine, aligner, window=TEST_WINDOW).stream(right_context=5, max_delay_ms=NO_DELAY)
    assert s.push("a b xylophone", now=0.0) == []
    with pytest.raises(EngineFailedError):
        s.end(now=1.0)
    assert s.ended and not s.finished and s.n_final == 0
    with pytest.raises(InputError, match="the stream has ended"):
        s.push("more", now=1.5)
    with pytest.raises(EngineFailedError):  # still failing: end() again tries again
        s.end(now=2.0)
    engine.fail_token = None
    finals = s.poll(now=3.0)
    assert [w.w for f in finals for w in f.words] == ["a", "b", "xylophone"] and finals[-1].words[-1].p in ".?"
    assert s.finished
    for call in (lambda: s.poll(now=4.0), lambda: s.end(now=4.0)):
        with pytest.raises(InputError, match="the stream has ended"):
            call()


def test_a_closed_punctuator_refuses_its_streams_and_punctuate_wraps_engine_failures(aligner):
    engine = FakeEngine(fail_token=aligner.word_ids("xylophone")[-1])
    p = Punctuator.from_engine(engine, aligner, window=TEST_WINDOW)
    with pytest.raises(EngineFailedError, match="inference failed: .*injected engine failure"):
        p.punctuate("a xylophone")
    s = p.stream()
    s.push("hello there", now=0.0)
    p.close()
    for call in (lambda: s.push("how are you", now=1.0), lambda: s.poll(now=1.0), lambda: s.end(now=1.0)):
        with pytest.raises(InputError, match="the stream's Punctuator is closed"):
            call()


def test_options_of_load_and_from_engine_are_checked_as_input_errors(aligner):
    engine = FakeEngine()
    for kwargs, message in [
        ({"capitalize": "no"}, "'capitalize' must be true or false"),
        ({"case_margin": -1.0}, "case_margin must be a finite number >= 0, not -1.0"),
        ({"window": "wide"}, "window must be a streampunct.core.windowing.WindowConfig or None, not str"),
        ({"stream_cache_tokens": 0}, "stream_cache_tokens must be None or an int >= 1, not 0"),
        ({"written": {}}, "written must be a WrittenForms"),
    ]:
        with pytest.raises(InputError, match=message):
            Punctuator.from_engine(engine, aligner, **kwargs)
    # load checks its arguments before it reads the model folder
    for kwargs, message in [
        ({"capitalize": 1}, "'capitalize' must be true or false"),
        ({"itn": "no"}, "'itn' must be true or false"),
        ({"stream_cache_tokens": -5}, "stream_cache_tokens must be None or an int >= 1, not -5"),
        ({"stream_cache_tokens": "10"}, "stream_cache_tokens must be None or an int >= 1, not '10'"),
        ({"stream_cache_tokens": 10.5}, "stream_cache_tokens must be None or an int >= 1, not 10.5"),
        ({"lexicon": 5}, "lexicon must be a list of .spoken, written. pairs, not 5"),
        ({"lexicon": "nasa NASA"}, "lexicon must be a list of .spoken, written. pairs, not a str"),
    ]:
        with pytest.raises(InputError, match=message):
            Punctuator.load("no/such/folder", **kwargs)
    with pytest.raises(InputError, match="clock must be a function that returns seconds, not None"):
        Punctuator.from_engine(engine, aligner, window=TEST_WINDOW).stream(clock=None)


def test_numpy_times_are_taken_as_floats(aligner):
    np = pytest.importorskip("numpy")
    s = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW).stream(right_context=0)
    finals = s.push([Word("hi", start=np.float32(1.5), end=np.int64(2))], now=np.int64(3))
    (word,) = [w for f in finals for w in f.words]
    assert (word.start, word.end) == (1.5, 2.0) and type(word.start) is float and type(word.end) is float
    for bad in (np.float64("nan"), np.bool_(True)):
        with pytest.raises(InputError, match="Word.start must be None or a finite number of seconds"):
            s.push([Word("hi", start=bad)], now=4.0)


def test_the_partial_is_cleared_once_the_stream_is_finished(aligner):
    s = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW).stream(
        right_context=3, max_delay_ms=NO_DELAY, partials=True)
    assert s.push("so what did", now=0.0) == []
    assert s.partial is not None and [w.w for w in s.partial.words] == ["so", "what", "did"]
    s.end(now=1.0)
    assert s.finished and s.partial is None


def test_a_malformed_tokenizer_is_a_model_error(tmp_path):
    from streampunct.core.alignment import Aligner

    (tmp_path / "tokenizer.json").write_text("{", encoding="utf-8")
    with pytest.raises(ModelError, match="cannot read the tokenizer .*tokenizer.json: "):
        Aligner.from_file(tmp_path)


def test_import_streampunct_stays_light():
    code = ("import sys, streampunct; heavy = [m for m in ('numpy', 'onnxruntime', 'tokenizers', 'streampunct.api')"
            " if m in sys.modules]; assert not heavy, heavy; "
            "from streampunct import Punctuator; import streampunct.api as api; assert Punctuator is api.Punctuator")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_cached_and_whole_windows_are_both_offered_by_load(shipped):
    with Punctuator.load(stream_cache="off") as whole:
        assert not whole.stream_cache
        s = whole.stream(right_context=1, max_delay_ms=NO_DELAY)
        finals = s.push("so what did you do") + s.end()
        assert [w.w for f in finals for w in f.words] == ["so", "what", "did", "you", "do"]


@pytest.mark.parametrize(("call", "message"), [
    (lambda s: s.push(["hello"], now=float("nan")), "now must be a finite number of seconds, not nan"),
    (lambda s: s.poll(now=float("-inf")), "now must be a finite number of seconds, not -inf"),
    (lambda s: s.push(["hello"], now="1.5"), "now must be a finite number of seconds, not '1.5'"),
    (lambda s: s.flush(now=True), "now must be a finite number of seconds, not True"),
    (lambda s: s.push([Word("hi", start=float("nan"))], now=0.0),
     "Word.start must be None or a finite number of seconds, not nan"),
    (lambda s: s.push([Word("hi", 0.0, float("inf"))], now=0.0),
     "Word.end must be None or a finite number of seconds, not inf"),
    (lambda s: s.push([Word(5)], now=0.0), "Word.w must be a str, not int"),
])
def test_times_are_finite_numbers_as_the_server_requires(aligner, call, message):
    """A NaN ``now`` would set a deadline no later call passes (the delay bound broken); a word's
    NaN time is a frame the server refuses. Both are refused, and the stream is unchanged."""
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    s = p.stream(right_context=3, max_delay_ms=1000)
    with pytest.raises(InputError) as caught:
        call(s)
    assert str(caught.value) == message
    assert s.n_words == 0 and s.next_deadline is None
    assert [w.w for f in s.push(["hello"], now=0.0) + s.poll(now=1.0) for w in f.words] == ["hello"]
    bad_clock = p.stream(clock=lambda: float("nan"))
    with pytest.raises(InputError, match="the stream's clock must return a finite number of seconds, not nan"):
        bad_clock.push(["hello"])


_TIMES = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(10**400), max_value=10**400),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3))


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=_TIMES)
def test_a_word_time_the_api_takes_is_one_the_wire_takes(aligner, start):
    """One rule (``wire.finite_number``): the API refuses a word's time exactly when a server
    would refuse it in a ``words`` frame, so an API stream never holds a word no server takes."""
    try:
        decode(json.dumps({"type": "words", "words": [{"w": "hi", "start": start}]}))
        wire_takes = True
    except ProtocolError:
        wire_takes = False
    s = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW).stream(right_context=3)
    try:
        s.push([Word("hi", start=start)], now=0.0)
        api_takes = True
    except InputError:
        api_takes = False
    assert api_takes == wire_takes


def test_punctuate_checks_its_options_and_a_closed_punctuator_says_so(aligner):
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    with pytest.raises(InputError, match="'capitalize' must be true or false"):
        p.punctuate("hello", capitalize="no")
    with pytest.raises(InputError, match="'itn' must be true or false"):
        p.punctuate("hello", itn=1)
    with pytest.raises(InputError, match="text must be a str or a sequence of words, not a dict"):
        p.punctuate({"hello": 1})
    assert p.punctuate("hello there", capitalize=False) == p.punctuate(["hello", "there"], capitalize=False)
    p.close()
    for call in (lambda: p.punctuate("hello"), p.stream):
        with pytest.raises(InputError, match="this Punctuator is closed"):
            call()


def test_an_unknown_engine_name_is_a_bad_argument_before_anything_loads(tmp_path):
    # a folder that is not a model: the engine name is refused before the folder is read
    for engine in (None, 5, "ONNXRUNTIME"):
        with pytest.raises(InputError, match=f"engine must be one of onnxruntime, .*not {engine!r}"):
            Punctuator.load(tmp_path, engine=engine)


def test_from_engine_refuses_an_aligner_or_stream_engine_it_cannot_use(aligner):
    with pytest.raises(InputError, match="aligner must be a streampunct.core.alignment.Aligner .*not NoneType"):
        Punctuator.from_engine(FakeEngine(), None, window=TEST_WINDOW)
    with pytest.raises(InputError, match=r"stream engine \(object\) does not declare infer_stream, stream_shape"):
        Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW, stream_engine=object())


def test_join_texts_takes_texts_not_one_text():
    assert join_texts(["Hello.", "", "New York", "'s here."]) == "Hello. New York's here."
    with pytest.raises(InputError, match="not one str"):
        join_texts("abc")
    with pytest.raises(InputError, match="str texts, not NoneType"):
        join_texts([None, "a"])


def test_a_tokenizer_that_is_not_the_folders_is_refused(tmp_path, shipped):
    # models/base's tokenizer in a copy of the default loaded and gave "Hello How are you I am Fine."
    import shutil

    folder = tmp_path / "default"
    shutil.copytree(DEFAULT_MODEL_DIR, folder)
    shutil.copyfile(DEFAULT_MODEL_DIR.parent / "base" / "tokenizer.json", folder / "tokenizer.json")
    with pytest.raises(ModelError, match=r"tokenizer.json is not the tokenizer .* was built with \(its sha256 "
                                         r"differs from streampunct.json's tokenizer_sha256\): restore it"):
        Punctuator.load(folder)
    shutil.copyfile(DEFAULT_MODEL_DIR / "tokenizer.json", folder / "tokenizer.json")
    with Punctuator.load(folder) as restored:
        assert restored.punctuate("hello how are you") == shipped.punctuate("hello how are you")


# -- what a probe of the API found --------------------------------------------------------


def test_a_partial_that_a_final_overtook_is_gone(aligner):
    """At a pause (a flush, a delay deadline) every word becomes final and no new partial comes:
    ``Stream.partial`` is None then, not the stale partial of words now final."""
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    for lexicon in ((), [("new york", "New York")]):
        s = p.stream(right_context=3, max_delay_ms=2000, partials=True, lexicon=lexicon)
        s.push(["i", "love", "cats"], now=0.0)
        assert s.partial is not None and [w.w for w in s.partial.words] == ["i", "love", "cats"]
        assert [w.w for f in s.flush(now=0.1) for w in f.words] == ["i", "love", "cats"]
        assert s.partial is None
        s.push(["and", "dogs"], now=1.0)
        assert s.partial is not None and s.partial.start == 3
        s.poll(now=3.5)  # both decided by their delay
        assert s.n_final == 5
        if lexicon:  # the written forms' partial of no words at a pause (protocol.md): nothing held
            assert (s.partial.start, s.partial.words, s.partial.text) == (5, (), "")
        else:
            assert s.partial is None


class WrongClassesEngine(FakeEngine):
    """Logits with a class too many, until ``fixed``."""

    fixed = False

    def infer(self, input_ids, attention_mask):
        logits = super().infer(input_ids, attention_mask)
        return logits if self.fixed else np.concatenate([logits, logits[..., :1]], axis=-1)


def test_an_engine_with_the_wrong_number_of_classes_fails_clearly_and_the_stream_goes_on(aligner):
    engine = WrongClassesEngine()
    p = Punctuator.from_engine(engine, aligner, window=TEST_WINDOW)
    s = p.stream(right_context=1, max_delay_ms=NO_DELAY)
    with pytest.raises(EngineFailedError, match="punctuation logits have 5 classes, not 4"):
        s.push(["so", "this", "is", "it"], now=0.0)
    with pytest.raises(EngineFailedError, match=r"logits have shape \(\d+, \d+, 5\)"):
        p.punctuate("so this is it")
    engine.fixed = True  # the call failed, not the stream: its words are asked for again
    finals = s.end(now=1.0)
    assert [w.w for f in finals for w in f.words] == ["so", "this", "is", "it"] and s.finished
    assert p.punctuate("so this is it")


@pytest.mark.skipif(not (DEFAULT_MODEL_DIR / "streampunct.json").is_file(), reason="needs the shipped model")
def test_has_case_is_the_same_after_close():
    p = Punctuator.load(DEFAULT_MODEL_DIR)
    assert p.has_case  # the shipped model has a truecasing head
    p.close()
    assert p.has_case  # a closed ONNX Runtime engine no longer says


def test_numpy_integers_are_options_and_an_empty_model_folder_is_refused(aligner):
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    s = p.stream(right_context=np.int64(2), max_delay_ms=np.int32(500))
    assert s.options.right_context == 2 and s.options.max_delay_ms == 500
    assert type(s.options.right_context) is int
    with pytest.raises(InputError, match="right_context"):
        p.stream(right_context=np.float64(2.5))
    with pytest.raises(InputError, match="model_dir is empty"):
        Punctuator.load("")


def test_numpy_booleans_are_flags_and_numpy_integers_cache_sizes(aligner):
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    s = p.stream(capitalize=np.True_, partials=np.False_)
    assert s.options.capitalize is True and s.options.partials is False
    assert p.punctuate("so what", capitalize=np.False_) == p.punctuate("so what", capitalize=False) == "so what?"
    with pytest.raises(InputError, match="'capitalize' must be true or false"):
        p.stream(capitalize=np.int64(1))  # a number is not a flag, numpy's or Python's
    with Punctuator.load(DEFAULT_MODEL_DIR, stream_cache_tokens=np.int64(32)) as shipped:
        assert shipped.stream().push(["hello"]) == []


def test_a_call_that_close_overtakes_raises_input_error_not_engine_failure(aligner):
    """close() from another thread while a model call runs: the call raises InputError (the
    punctuator is closed, the stream cannot go on), not EngineFailedError (which says it can)."""
    import threading

    class Blocking(FakeEngine):
        def __init__(self) -> None:
            super().__init__()
            self.entered, self.release, self.closed = threading.Event(), threading.Event(), False

        def _wait(self) -> None:
            self.entered.set()
            assert self.release.wait(30)
            if self.closed:
                raise RuntimeError("engine is closed")

        def infer(self, input_ids, attention_mask):
            self._wait()
            return super().infer(input_ids, attention_mask)

        def infer_heads(self, input_ids, attention_mask):
            self._wait()
            return super().infer_heads(input_ids, attention_mask)

        def close(self) -> None:
            self.closed = True

    for call in ("punctuate", "stream"):
        engine = Blocking()
        p = Punctuator.from_engine(engine, aligner, window=TEST_WINDOW)
        result: list[BaseException | str] = []

        def run(p=p, call=call, result=result) -> None:
            try:
                if call == "punctuate":
                    p.punctuate("so what now")
                else:
                    s = p.stream()
                    s.push(["so", "what"])
                    s.end()
                result.append("finished")
            except BaseException as e:  # noqa: BLE001 - the test reports what was raised
                result.append(e)

        t = threading.Thread(target=run)
        t.start()
        assert engine.entered.wait(30), result
        p.close()
        engine.release.set()
        t.join(30)
        [error] = result
        assert isinstance(error, InputError) and not isinstance(error, EngineFailedError), (call, error)
        assert "closed (close() was called) during the call" in str(error)


class InterruptedEngine(FakeEngine):
    """A fake engine whose next call raises ``KeyboardInterrupt`` (Ctrl-C during inference)."""

    interrupt = False

    def infer(self, *args, **kwargs):
        if self.interrupt:
            self.interrupt = False
            raise KeyboardInterrupt
        return super().infer(*args, **kwargs)


def test_a_ctrl_c_during_a_model_call_leaves_the_stream_to_go_on(aligner):
    """A KeyboardInterrupt in a window's call is raised as it is; the window is asked for
    again (it is not left in flight for ever, which made end() return nothing, unfinished)."""
    engine = InterruptedEngine()
    s = Punctuator.from_engine(engine, aligner, window=TEST_WINDOW).stream(right_context=1, max_delay_ms=NO_DELAY)
    got = s.push(["the", "cat"], now=0.0)
    engine.interrupt = True
    with pytest.raises(KeyboardInterrupt):
        s.push(["sat", "on", "the", "mat"], now=1.0)
    got += s.end(now=2.0)
    assert s.finished
    assert _indices(got) == list(range(6))
    assert [w.w for f in got for w in f.words] == ["the", "cat", "sat", "on", "the", "mat"]
