"""``resume`` context items that normalize to nothing (``"$$$"``, ``"..."``, an emoji): they are
no words, as in ``words`` (they take no index), so neither ``start`` nor ``held`` counts them
(docs/protocol.md, "`resume`" and "Resume")."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from streampunct.core.options import SessionOptions
from streampunct.core.wire import (
    ConfigRequest,
    EndRequest,
    Error,
    ErrorCode,
    Final,
    ProtocolError,
    PunctuatedWord,
    Resumed,
    ResumeRequest,
    Word,
    WordsMessage,
    decode,
)
from tests.streampunct.test_session_protocol import Driver

SYMBOLS = ("$$$", "...", "\U0001f600", "-")


def frame(start: int, context: list[tuple[str, str]], held: int | None = None) -> str:
    obj: dict = {
        "type": "resume",
        "start": start,
        "context": [{"w": w, "p": p} for w, p in context],
    }
    if held is not None:
        obj["held"] = held
    return json.dumps(obj)


def refusal(text: str) -> str:
    with pytest.raises(ProtocolError) as info:
        decode(text)
    assert info.value.code is ErrorCode.BAD_REQUEST
    return info.value.message


# -- held counts words ------------------------------------------------------------


def test_held_beyond_the_context_words_is_refused_even_when_items_make_up_the_number():
    """``[{"w": "$$$"}]`` with ``held`` 1 was taken as nothing held; an empty context with
    ``held`` 1 was refused. Both hold no word: both are refused, alike."""
    assert refusal(frame(1, [("$$$", "")], held=1)) == (
        "resume: 'held' must be an integer from 0 to the 0 context words, not 1; "
        "1 of the context's items normalize to no word and are not counted"
    )
    assert (
        refusal(frame(1, [], held=1))
        == "resume: 'held' must be an integer from 0 to the 0 context words, not 1"
    )
    assert refusal(frame(2, [("new", ""), ("$$$", "")], held=2)).startswith(
        "resume: 'held' must be an integer from 0 to the 1 context words, not 2;"
    )
    # up to the words is fine, wherever the symbol items stand
    assert decode(frame(2, [("$$$", ""), ("new", "")], held=1)).held == 1
    assert decode(frame(2, [("new", ""), ("\U0001f600", "")], held=1)).held == 1
    assert decode(frame(1, [("$$$", "")], held=0)).held == 0


def test_the_session_refuses_a_held_beyond_the_words_and_stays_fresh():
    """A request made in Python (no decoder) gets the same answer, and a refused resume
    leaves the connection as it was: a good one may follow."""
    driver = Driver(SessionOptions(right_context=0))
    [error] = driver.send(
        ResumeRequest(3, (PunctuatedWord("t1x1", ""), PunctuatedWord("...", "")), held=2)
    )
    assert error == Error(
        ErrorCode.BAD_REQUEST,
        "resume: 'held' must be an integer from 0 to the 1 context words, "
        "not 2; 1 of the context's items normalize to no word and are "
        "not counted",
    )
    [resumed] = driver.send(ResumeRequest(3, (PunctuatedWord("t1x1", ""),), held=1))
    assert isinstance(resumed, Resumed) and resumed.start == 3


# -- start counts words -------------------------------------------------------------


def test_symbol_items_do_not_count_against_start():
    """``start`` is the index of the first word without a final; the context is the final words
    before it. Items that are no words take no index, so a context of one word and one symbol
    item fits before ``start`` 1 (it was refused as two words)."""
    assert decode(frame(1, [("$$$", ""), ("t1x1", ".")])) == ResumeRequest(
        1, (PunctuatedWord("$$$", ""), PunctuatedWord("t1x1", "."))
    )
    assert decode(frame(0, [("...", ""), ("\U0001f600", "")])).start == 0
    # words still count: two words do not fit before word 1
    assert refusal(frame(1, [("t1x1", ""), ("$$$", ""), ("t1x2", "")])) == (
        "resume: 2 context words, but only 1 words come before 'start'; "
        "1 of the context's items normalize to no word and are not counted"
    )
    assert (
        refusal(frame(1, [("t1x1", ""), ("t1x2", "")]))
        == "resume: 2 context words, but only 1 words come before 'start'"
    )


def test_a_context_with_symbol_items_resumes_at_start_through_the_wire():
    driver = Driver(SessionOptions(right_context=0, capitalize=True))
    [resumed] = driver.frame(
        frame(2, [("t1x1", ""), ("$$$", ""), ("t1x2", "."), ("\U0001f600", "")])
    )
    assert resumed.start == 2
    assert driver.protocol.state.words == ["t1x1", "t1x2"]
    [final] = driver.send(WordsMessage((Word("t1x3"),)))
    assert final.start == 2 and [w.w for w in final.words] == ["t1x3"]
    assert final.text[0].isupper()  # after "t1x2.", the last word the context holds
    assert driver.send(EndRequest())[-1].words == 3


def test_the_session_refuses_more_context_words_than_start_instead_of_failing():
    """A request made in Python with more words than ``start`` was a ValueError from the stream
    state, after the options had changed; it is a ``bad_request`` that changes nothing."""
    driver = Driver(SessionOptions(right_context=0))
    before = driver.protocol.options
    [error] = driver.send(
        ResumeRequest(0, (PunctuatedWord("t1x1", ""),), ConfigRequest(right_context=3))
    )
    assert error == Error(
        ErrorCode.BAD_REQUEST, "resume: 1 context words, but only 0 words come before 'start'"
    )
    assert driver.protocol.options == before and driver.protocol.n_words == 0
    [resumed] = driver.send(ResumeRequest(0, (PunctuatedWord("$$$", ""),)))
    assert resumed.start == 0


# -- the property: symbol items change nothing --------------------------------------


@st.composite
def contexts(draw):
    """A stream's final words, a cut after some of them (``start``), a context of the last
    ones with symbol items put anywhere in it, and a ``held`` that may exceed the words."""
    n = draw(st.integers(1, 8))
    marks = draw(st.lists(st.sampled_from(["", ",", ".", "?"]), min_size=n, max_size=n))
    words = [(f"t{1 + k % 3}x{k + 1}", marks[k]) for k in range(n)]
    start = draw(st.integers(0, n))
    context = words[max(0, start - draw(st.integers(0, start))) : start]
    padded: list[tuple[str, str]] = []
    for item in context:
        padded += [
            (draw(st.sampled_from(SYMBOLS)), draw(st.sampled_from(["", "."])))
            for _ in range(draw(st.integers(0, 2)))
        ]
        padded.append(item)
    padded += [(s, "") for s in draw(st.lists(st.sampled_from(SYMBOLS), max_size=2))]
    held = draw(st.one_of(st.none(), st.integers(0, len(padded) + 1)))
    return words, start, context, padded, held


@settings(max_examples=80, deadline=None)
@given(contexts())
@example(([("t1x1", "")], 1, [], [("$$$", "")], 1))  # held 1 on no word: refused, as with []
@example(
    ([("t1x1", ".")], 1, [("t1x1", ".")], [("$$$", ""), ("t1x1", ".")], None)
)  # 2 items before word 1
def test_symbol_items_in_a_resume_context_change_nothing(case):
    """A context with symbol items is accepted or refused exactly as the same context without
    them (refusals naming the same counts), and an accepted one resumes the same stream."""
    words, start, context, padded, held = case

    def run(items):
        driver = Driver(SessionOptions(right_context=1, capitalize=True))
        replies = driver.frame(frame(start, items, held))
        if isinstance(replies[0], Error):
            return replies[0].message.split(";")[0]
        driver.send(WordsMessage(tuple(Word(w) for w, _ in words[start:])))
        driver.send(EndRequest())
        return [
            (m.start, [(w.w, w.p) for w in m.words], m.text) for m in driver.of(Final)
        ], driver.out[-1].words

    plain = run(context)
    assert run(padded) == plain
    if held is not None and held > len(context):
        assert (
            plain
            == f"resume: 'held' must be an integer from 0 to the {len(context)} context words, not {held}"
        )
    else:
        finals, n = plain
        assert n == len(words) and (not finals or finals[0][0] == start)


def test_a_huge_held_is_shown_by_its_digits_in_the_refusal():
    # a 400-digit held is not repeated whole; one past Python's 4300-digit str limit
    # (made in Python) is refused the same way, not with int's own ValueError
    assert refusal('{"type": "resume", "start": 1, "context": [], "held": -' + "1" * 400 + "}") == (
        "resume: 'held' must be an integer from 0 to the 0 context words, not a negative integer of 400 digits"
    )
    driver = Driver(SessionOptions(right_context=0))
    assert driver.send(ResumeRequest(0, (), None, 10**5000)) == [
        Error(
            ErrorCode.BAD_REQUEST,
            "resume: 'held' must be an integer from 0 to the 0 context words, "
            "not an integer of 5001 digits",
        )
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '{"type": "resume", "start": ' + "9" * 400 + ', "context": []}',
            "resume: 'start' must be between 0 and 9007199254740991, not an integer of 400 digits",
        ),
        (
            '{"type": "resume", "start": -' + "9" * 400 + ', "context": []}',
            "resume: 'start' must be between 0 and 9007199254740991, "
            "not a negative integer of 400 digits",
        ),
        (
            '{"type": "resume", "start": 1, "context": [{"w": "so", "p": "' + "!" * 300 + '"}]}',
            'resume: context[0].p must be one of "", ",", ".", "?", '
            "not '!!!!!!!!!!!!!!!!!!!!!!!... (302 characters)",
        ),
        (
            '{"type": "' + "x" * 500 + '"}',
            "unknown message type 'xxxxxxxxxxxxxxxxxxxxxxx... (502 characters); "
            "expected config, words, hypothesis, flush, end or resume",
        ),
    ],
)
def test_a_long_start_mark_or_type_is_shown_short_in_the_refusal(text, message):
    """As ``held`` and the config's options: a client's 400-digit ``start`` or 300-character
    mark is not repeated whole in its ``bad_request``."""
    assert refusal(text) == message
