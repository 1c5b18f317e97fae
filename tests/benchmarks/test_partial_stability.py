"""Interim stability counts (benchmarks/partial_stability.py) on hand-made message sequences."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from benchmarks.partial_stability import Stability, partial_stability, total
from streampunct.core.wire import Final, Flushed, Partial, PunctuatedWord


def ws(*pairs: str) -> tuple[PunctuatedWord, ...]:
    """``ws("a", "b,")``: words with their marks."""
    return tuple(PunctuatedWord(p.rstrip(",.?"), p[len(p.rstrip(",.?")):]) for p in pairs)


def text(*pairs: str) -> str:
    return " ".join(pairs)


def final(start: int, *pairs: str, written: str | None = None) -> Final:
    return Final(start, ws(*pairs), written or text(*pairs))


def partial(start: int, words: tuple[str, ...], hyp: tuple[str, ...] = (), written: str | None = None) -> Partial:
    return Partial(start, ws(*words), written or text(*words, *hyp), ws(*hyp))


def test_marks_that_change_in_partials_and_at_the_final_are_counted():
    messages = [
        partial(0, ("a",), ("b.",)),          # a "", b "." (hypothesis word = index 1)
        partial(0, ("a,", "b")),              # a: "" -> ","; b: "." -> ""        2 changes
        final(0, "a,"),                       # a as last shown: correct
        partial(1, ("b.", "c")),              # b: "" -> "."                      1 change
        Flushed(3),
        final(1, "b.", "c?"),                 # b correct; c last "" != "?": a change at the final
        final(3, "d."),                       # never shown
    ]
    s = partial_stability(messages)
    assert s == Stability(words=4, words_shown=3, last_partial_correct=2, changes_in_partials=3, changes_at_final=1)
    assert s.changes == 4 and s.changes_per_100_words == 100.0
    assert s.last_partial_accuracy == pytest.approx(200 / 3)
    assert s.to_dict()["last_partial_accuracy"] == 66.67 and s.to_dict()["words_shown_in_partials"] == 3


def test_a_partial_arriving_after_a_words_final_does_not_show_it():
    messages = [final(0, "a,"), partial(0, ("a.", "b")), final(1, "b.")]
    assert partial_stability(messages) == Stability(words=2, words_shown=1, last_partial_correct=0,
                                                    changes_in_partials=0, changes_at_final=1)


def test_case_changes_count_when_the_text_writes_them():
    messages = [
        partial(0, ("so", "what")),
        partial(0, ("so.", "what"), written="so. What"),   # so: mark; what: case     2 changes
        final(0, "so.", "what?", written="so. What?"),      # what: ("", What) -> ("?", What)
    ]
    assert partial_stability(messages) == Stability(words=2, words_shown=2, last_partial_correct=1,
                                                    changes_in_partials=2, changes_at_final=1)
    # with the same marks, only the case differs at the final
    messages = [partial(0, ("i", "know.")), final(0, "i", "know.", written="I know.")]
    assert partial_stability(messages) == Stability(words=2, words_shown=2, last_partial_correct=1,
                                                    changes_in_partials=0, changes_at_final=1)


def test_a_revised_hypothesis_word_is_another_word_not_a_change():
    messages = [
        partial(0, (), ("the",)),       # the ASR heard "the" ...
        partial(0, (), ("then.",)),     # ... then "then": another word at index 0, no change
        final(0, "then."),
    ]
    assert partial_stability(messages) == Stability(words=1, words_shown=1, last_partial_correct=1)
    # a hypothesis word that is not the committed one is not shown for it
    assert partial_stability([partial(0, (), ("the.",)), final(0, "then.")]) == Stability(words=1)


def test_a_cleared_hypothesis_changes_nothing_and_other_messages_are_ignored():
    messages = [partial(0, (), ("a,",)), partial(0, ()), Flushed(0), partial(0, ("a,",)), final(0, "a,")]
    assert partial_stability(messages) == Stability(words=1, words_shown=1, last_partial_correct=1)


def test_no_partials_and_no_words():
    assert partial_stability([final(0, "a.")]) == Stability(words=1)
    assert Stability().last_partial_accuracy is None and Stability().changes_per_100_words is None
    assert Stability().to_dict()["last_partial_accuracy"] is None


def test_finals_out_of_order_are_refused():
    with pytest.raises(ValueError, match="final for words from 2, but 0 words are final"):
        partial_stability([final(2, "a.")])


def test_sessions_add_up():
    a = Stability(10, 8, 7, 3, 1)
    assert total([a, a, Stability()]) == Stability(20, 16, 14, 6, 2)


@st.composite
def streams_whose_partials_equal_the_finals(draw):
    n = draw(st.integers(1, 40))
    words = [draw(st.sampled_from(["a", "so", "we", "go", "home"])) + draw(st.sampled_from(["", ",", ".", "?"]))
             for _ in range(n)]
    messages, done = [], 0
    while done < n:
        size = draw(st.integers(1, min(4, n - done)))
        for _ in range(draw(st.integers(0, 3))):   # partials before this final, all showing final marks
            start = draw(st.integers(max(0, done - 2), done))   # some stale words below the final count
            committed = draw(st.integers(done, n))
            hyp = draw(st.integers(0, n - committed))
            messages.append(partial(start, tuple(words[start:committed]), tuple(words[committed:committed + hyp])))
        messages.append(final(done, *words[done:done + size]))
        done += size
    return n, messages


@given(streams_whose_partials_equal_the_finals())
def test_partials_that_always_equal_the_finals_are_all_correct_with_no_changes(stream):
    n, messages = stream
    s = partial_stability(messages)
    assert s.words == n and s.changes == 0
    assert s.last_partial_correct == s.words_shown
    assert s.words_shown == 0 or s.last_partial_accuracy == 100.0


def test_early_marks_count_the_final_marks_the_last_partial_showed():
    from benchmarks.partial_stability import EarlyMarks, early_marks

    messages = [
        partial(0, ("a.", "b"), ("c",)),    # a "." (held later), b "", c ""
        partial(0, ("a", "b,", "c?")),      # the last partial of each: a "", b ",", c "?"
        final(0, "a.", "b,", "c."),         # a's mark not shown in time; b's shown; c's other mark
        final(3, "d."),                     # never shown: not counted
        partial(4, ("e",)),
        final(4, "e"),                      # no mark: not counted
    ]
    assert early_marks(messages) == EarlyMarks(marks=3, shown_early=1)
    assert early_marks(messages).to_dict() == {"final_marks_shown_in_partials": 3, "shown_early": 1,
                                               "shown_early_percent": 33.33}
    assert EarlyMarks().share is None and EarlyMarks(2, 1) + EarlyMarks(2, 2) == EarlyMarks(4, 3)
