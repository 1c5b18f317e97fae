"""Holding back unsure marks in partials (``serve --partial-mark-threshold``, issue 40 item 4):
a partial shows a word's mark only when the model's probability of it reaches the threshold,
its text follows (no sentence-start capital after a held-back period), finals never change,
and 0 is the behaviour without the option."""

from __future__ import annotations

import argparse
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engines.base import EngineBase, HeadLogits
from streampunct.core.engine_call import run_calls
from streampunct.core.options import SessionOptions
from streampunct.core.session_protocol import SessionProtocol
from streampunct.core.stream_state import StreamState, hold_back_marks
from streampunct.core.windowing import WindowConfig
from streampunct.core.wire import EndRequest, Final, HypothesisMessage, Partial, Word, WordsMessage
from streampunct.labels import (
    CAPITALIZED,
    COMMA,
    LOWER,
    PERIOD,
    QUESTION,
    UPPER,
    O,
    check_partial_mark_threshold,
)
from tests.streampunct.fakes import FakeAligner
from tests.streampunct.test_session_protocol import context_infer

WINDOW = WindowConfig(48, 8, 6)
NO_DELAY = 600_000
#: punctuation logits whose softmax gives the argmax 0.475 (unsure) or 0.993 (sure)
UNSURE, SURE = 1.0, 6.0

#: "we went home it rained then nasa called": the model is unsure of the period after "home"
#: and the question mark after "then", sure of the period after "rained"; its case head
#: capitalizes "it" (a sentence start it learned) and writes "nasa" in capitals.
WORDS = "we went home it rained then nasa called".split()
TABLE = {
    "home": (PERIOD, UNSURE, None),
    "it": (O, SURE, [0.0, 5.0, -4.0, -4.0]),
    "rained": (PERIOD, SURE, None),
    "then": (QUESTION, UNSURE, None),
    "nasa": (O, SURE, [0.0, 1.0, 3.0, -4.0]),
}
ALL_MARKS = ["", "", ".", "", ".", "?", "", ""]
SURE_MARKS = ["", "", "", "", ".", "", "", ""]


class ChosenEngine(EngineBase):
    """Logits chosen per word (by its label token): its class at the given height over the
    others' 0, and a case row as given; every other token a sure O, lowercase."""

    name = "chosen"
    has_case = True

    def __init__(self, aligner, table=TABLE) -> None:
        self._rows = {}
        for word, row in table.items():
            ids = aligner.word_ids(word)
            self._rows[ids[aligner.label_offset(len(ids))]] = row

    def infer(self, input_ids, attention_mask):
        return self.infer_heads(input_ids, attention_mask).punctuation

    def infer_heads(self, input_ids, attention_mask):
        punct = np.zeros((*input_ids.shape, 4), dtype=np.float32)
        punct[..., O] = SURE
        case = np.zeros((*input_ids.shape, 4), dtype=np.float32)
        case[...] = [0.0, -3.0, -4.0, -4.0]
        for token, (label, height, row) in self._rows.items():
            at = input_ids == token
            punct[at] = height * np.eye(4, dtype=np.float32)[label]
            if row is not None:
                case[at] = row
        return HeadLogits(punct, case)


def _drive(protocol: SessionProtocol, engine, now: float = 0.0) -> list:
    out = []
    while (call := protocol.next_call(now)) is not None:
        (output,) = run_calls(engine, [call], 0)
        out += protocol.apply(call, output)
    return out


def _session(aligner, threshold: float, *, capitalize: bool = True, hypothesis: tuple[str, ...] = ()):
    """All the words in one message (none final: right context 20), a hypothesis, then the end:
    the last partial and the finals."""
    engine = ChosenEngine(aligner)
    protocol = SessionProtocol(aligner=aligner, window=WINDOW, partial_mark_threshold=threshold,
                               defaults=SessionOptions(right_context=20, max_delay_ms=NO_DELAY, partials=True,
                                                       capitalize=capitalize))
    out = protocol.receive(WordsMessage(tuple(Word(w) for w in WORDS)), 0.0) + _drive(protocol, engine)
    if hypothesis:
        out += protocol.receive(HypothesisMessage(tuple(Word(w) for w in hypothesis)), 0.1) + _drive(protocol, engine)
    out += protocol.receive(EndRequest(), 0.2) + _drive(protocol, engine)
    partials = [m for m in out if isinstance(m, Partial)]
    return partials[-1], [m for m in out if isinstance(m, Final)]


# -- the rule ------------------------------------------------------------------------


def test_a_mark_is_shown_at_the_threshold_and_held_back_below_it():
    logits = np.log(np.asarray([[0.1, 0.6, 0.2, 0.1], [0.05, 0.05, 0.8, 0.1], [0.7, 0.1, 0.1, 0.1]]))
    labels = logits.argmax(-1)
    assert hold_back_marks(logits, labels, None, 0.6)[0].tolist() == [COMMA, PERIOD, O]
    assert hold_back_marks(logits, labels, None, 0.61)[0].tolist() == [O, PERIOD, O]
    assert hold_back_marks(logits, labels, None, 0.81)[0].tolist() == [O, O, O]  # O is never "held"


def test_the_capital_after_a_held_back_sentence_mark_is_dropped_and_no_other():
    logits = np.log(np.asarray([[0.1, 0.1, 0.7, 0.1], [0.9, 0.03, 0.04, 0.03], [0.1, 0.1, 0.1, 0.7],
                                [0.9, 0.03, 0.04, 0.03], [0.1, 0.1, 0.75, 0.05], [0.9, 0.03, 0.04, 0.03]]))
    labels = logits.argmax(-1)
    cases = np.asarray([LOWER, CAPITALIZED, LOWER, UPPER, LOWER, CAPITALIZED])
    shown, shown_cases = hold_back_marks(logits, labels, cases, 0.72)
    assert shown.tolist() == [O, O, O, O, PERIOD, O]
    # after the held-back period: lowercase; an acronym after a held-back "?" keeps its capitals;
    # after a period that is shown the capital stays
    assert shown_cases.tolist() == [LOWER, LOWER, LOWER, UPPER, LOWER, CAPITALIZED]


def test_threshold_zero_changes_nothing():
    logits = np.random.default_rng(0).normal(size=(9, 4))
    labels, cases = logits.argmax(-1), np.arange(9) % 4
    shown, shown_cases = hold_back_marks(logits, labels, cases, 0.0)
    assert shown.tolist() == labels.tolist() and shown_cases is cases


@pytest.mark.parametrize("bad", [-0.1, 1.0, 1.5, math.nan, math.inf, True, "0.5", None])
def test_a_threshold_outside_zero_to_one_is_refused(aligner, bad):
    with pytest.raises(ValueError, match=r"partial mark threshold must be a number in \[0, 1\), not "):
        check_partial_mark_threshold(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"partial mark threshold must be a number in \[0, 1\)"):
        StreamState(aligner, WINDOW, SessionOptions(), partial_mark_threshold=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"partial mark threshold must be a number in \[0, 1\)"):
        SessionProtocol(aligner=aligner, window=WINDOW, partial_mark_threshold=bad)  # type: ignore[arg-type]


def test_thresholds_in_range_are_taken():
    assert check_partial_mark_threshold(0) == 0.0 and check_partial_mark_threshold(0.999) == 0.999


# -- a session: partials hold back, finals do not ---------------------------------------


def test_a_partial_holds_back_unsure_marks_and_its_text_follows(aligner):
    partial, finals = _session(aligner, 0.5)
    assert [w.w for w in partial.words] == WORDS
    assert [w.p for w in partial.words] == SURE_MARKS
    # no period after "home", so "it" opens no sentence (its learned capital is dropped too);
    # no "?" after "then", which opens a sentence after the period it follows
    assert partial.text == "We went home it rained. Then NASA called"
    assert [w.p for f in finals for w in f.words] == [*ALL_MARKS[:-1], "."]  # the end's period
    assert " ".join(f.text for f in finals) == "We went home. It rained. Then? NASA called."


def test_threshold_zero_shows_every_mark_as_without_the_option(aligner):
    partial, finals = _session(aligner, 0.0)
    assert [w.p for w in partial.words] == ALL_MARKS
    assert partial.text == "We went home. It rained. Then? NASA called"
    default_partial, default_finals = _session(aligner, 0.4)  # no argmax of 4 classes is below 0.25
    assert default_partial == partial and default_finals == finals


def test_hypothesis_words_hold_back_unsure_marks_too(aligner):
    held, _ = _session(aligner, 0.5, capitalize=False, hypothesis=("home", "rained", "so"))
    shown, _ = _session(aligner, 0.0, capitalize=False, hypothesis=("home", "rained", "so"))
    assert [w.w for w in held.hypothesis] == ["home", "rained", "so"]
    assert [w.p for w in shown.hypothesis][:2] == [".", "."]
    assert [w.p for w in held.hypothesis][:2] == ["", "."]
    assert held.text.split()[-3:] == ["home", "rained.", "so"] and shown.text.split()[-3:] == ["home.", "rained.", "so"]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), threshold=st.sampled_from([0.3, 0.5, 0.9]))
def test_finals_never_depend_on_the_threshold(seed, threshold):
    """Random schedules with hypotheses, every word's mark 0.475 sure (one-hot logits): with a
    threshold above that no partial shows a mark, and the finals are those of threshold 0."""
    rng = random.Random(seed)
    vocab = [FakeAligner.word(n, s) for n in (1, 2, 3) for s in range(6)]

    def play(p: float) -> list:
        protocol = SessionProtocol(aligner=FakeAligner(), window=WindowConfig(24, 4, 3), partial_mark_threshold=p,
                                   defaults=SessionOptions(right_context=rng_rc, max_delay_ms=1500, partials=True))
        out, now = [], 0.0
        for kind, words in events:
            now += 0.5
            while (deadline := protocol.next_deadline()) is not None and deadline <= now:
                out += _pump(protocol, deadline)
            message = (WordsMessage if kind == "words" else HypothesisMessage)(tuple(Word(w) for w in words))
            out += protocol.receive(message, now) + _pump(protocol, now)
        return out + protocol.receive(EndRequest(), now + 0.5) + _pump(protocol, now + 0.5)

    rng_rc = rng.randint(0, 3)
    events = [(rng.choice(["words", "words", "hypothesis"]), [rng.choice(vocab) for _ in range(rng.randint(1, 4))])
              for _ in range(rng.randint(3, 15))]
    plain, held = play(0.0), play(threshold)
    finals = [m for m in plain if isinstance(m, Final)]
    assert [m for m in held if isinstance(m, Final)] == finals
    assert [w.w for f in finals for w in f.words] == [w for kind, ws in events if kind == "words" for w in ws]
    partials = [m for m in held if isinstance(m, Partial)]
    assert len(partials) == len([m for m in plain if isinstance(m, Partial)])
    marks = {w.p for m in partials for w in (*m.words, *m.hypothesis)}
    assert marks <= ({""} if threshold > 0.475 else set(".,?") | {""})
    if threshold < 0.475:
        assert held == plain


def _pump(protocol: SessionProtocol, now: float) -> list:
    out = []
    while (request := protocol.next_request(now)) is not None:
        out += protocol.apply(request, context_infer(request.input_ids))
    return out


# -- the Python API and the server -----------------------------------------------------


def test_the_python_api_takes_the_threshold_and_refuses_a_bad_one(aligner):
    from streampunct.api import Punctuator
    from streampunct.errors import InputError

    p = Punctuator.from_engine(ChosenEngine(aligner), aligner, window=WINDOW)
    for threshold, marks in ((0.5, SURE_MARKS), (0.0, ALL_MARKS)):
        s = p.stream(right_context=20, max_delay_ms=NO_DELAY, partials=True, partial_mark_threshold=threshold)
        assert s.push(WORDS, now=0.0) == []
        assert [w.p for w in s.partial.words] == marks
        assert [w.p for f in s.end(now=1.0) for w in f.words] == [*ALL_MARKS[:-1], "."]
    for bad in (-0.5, 1.0, math.nan, "high"):
        with pytest.raises(InputError, match=r"partial_mark_threshold must be a number in \[0, 1\), not "):
            p.stream(partial_mark_threshold=bad)  # type: ignore[arg-type]


async def test_a_server_holds_back_marks_as_the_python_api_does(aligner):
    from streampunct.api import Punctuator
    from streampunct.client.stream_client import StreamClient
    from streampunct.server.app import ServerConfig, ServerRuntime, serve

    local = Punctuator.from_engine(ChosenEngine(aligner), aligner, window=WINDOW)
    for threshold in (0.5, 0.0):
        server = await serve(ServerConfig(host="127.0.0.1", port=0, partial_mark_threshold=threshold),
                             ServerRuntime(lambda: ChosenEngine(aligner), aligner, WINDOW, "chosen"))
        try:
            await server.wait_ready()
            client = await StreamClient.connect(server.url, right_context=20, max_delay_ms=NO_DELAY,
                                                partials=True, capitalize=True)
            await client.send_words(WORDS)
            while not isinstance(served := await client.recv(timeout=10), Partial):  # the words' partial
                pass
            await client.end()
            served_finals = [m async for m in client if isinstance(m, Final)]
        finally:
            await server.shutdown()
        s = local.stream(right_context=20, max_delay_ms=NO_DELAY, partials=True, capitalize=True,
                         partial_mark_threshold=threshold)
        s.push(WORDS, now=0.0)
        assert served == s.partial
        assert [w.p for w in served.words] == (SURE_MARKS if threshold else ALL_MARKS)
        assert served_finals == s.end(now=1.0)


def _serve_parser() -> argparse.ArgumentParser:
    from streampunct.commands import serve

    p = argparse.ArgumentParser(prog="streampunct serve")
    serve.add_arguments(p)
    return p


@pytest.mark.parametrize("value", ["1", "-0.1", "1.5", "nan", "high"])
def test_the_serve_flag_refuses_a_threshold_outside_zero_to_one(value, capsys):
    with pytest.raises(SystemExit) as exc:
        _serve_parser().parse_args(["--partial-mark-threshold", value])
    assert exc.value.code == 2
    assert "argument --partial-mark-threshold:" in capsys.readouterr().err


def test_the_serve_flag_reaches_the_server_config():
    from streampunct.commands import serve
    from streampunct.errors import InputError
    from streampunct.server.app import ServerConfig

    args = _serve_parser().parse_args(["--partial-mark-threshold", "0.7"])
    assert serve.build_config(args).partial_mark_threshold == 0.7
    assert serve.build_config(_serve_parser().parse_args([])).partial_mark_threshold == 0.0
    args.partial_mark_threshold = 1.0  # past argparse: the config's own check, named as the flag
    with pytest.raises(InputError, match=r"^--partial-mark-threshold must be a number in \[0, 1\), not 1.0$"):
        serve.build_config(args)
    with pytest.raises(ValueError, match=r"partial_mark_threshold must be a number in \[0, 1\)"):
        ServerConfig(partial_mark_threshold=-1.0)
