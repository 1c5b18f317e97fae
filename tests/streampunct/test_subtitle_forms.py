"""Subtitle cues around written forms and lexicon phrases: no line break inside one, and the
cue of a form said across a long pause, through the finals as the server writes them."""

from __future__ import annotations

import io

from hypothesis import given, settings
from hypothesis import strategies as st

from streampunct.client.subtitles import (
    CueBuilder,
    CueLimits,
    Piece,
    SubtitleWriter,
    TimedWord,
    cue_stats,
    layout,
    said_from,
)
from streampunct.labels import COMMA, PERIOD, O


def spoken(text: str, *, step: float = 0.3, start: float = 0.0) -> list[TimedWord]:
    """Spoken words with marks attached ("today." -> PERIOD), one every ``step`` seconds."""
    return [
        TimedWord(
            w.rstrip(",."),
            {",": COMMA, ".": PERIOD}.get(w[-1], O),
            start + i * step,
            start + (i + 1) * step,
        )
        for i, w in enumerate(text.split())
    ]


def caption(finals, phrases=()) -> SubtitleWriter:
    """The cues of finals ``(words, text)`` (or ``"pause"``: the caption client's flush)."""
    writer = SubtitleWriter("jsonl", [io.StringIO()], CueBuilder(phrases=phrases))
    for final in finals:
        if final == "pause":
            writer.flush()
        else:
            writer.add_final(*final)
    writer.close()
    return writer


def lines_of(writer: SubtitleWriter) -> list[tuple[str, ...]]:
    return [c.lines for c in writer.cues]


# -- no line break inside a written form or a phrase --------------------------------------------------


def test_a_line_break_never_falls_inside_a_lexicon_phrase():
    """The lexicon form "Rio de Janeiro" spells its words (plain pieces); told the lexicon's phrases, the cue lays it
    out on one line (it was "...arrived in Rio" / "de Janeiro with ...")."""
    text = "after a very long flight we arrived in Rio de Janeiro with my brother and sister."
    writer = caption([(spoken(text.lower()), text)], phrases=[("rio", "de", "janeiro")])
    assert lines_of(writer) == [
        ("after a very long flight we arrived in", "Rio de Janeiro with my brother and sister.")
    ]


def test_a_line_break_never_falls_inside_a_name():
    """Two lines of 42 characters fit this sentence only with "New" ending the first line: the cue
    is cut instead (it was one cue, "... all the way to New" / "York and then ...")."""
    text = "we took the slow train all the way to New York and then we drove on to the coast."
    assert lines_of(caption([(spoken(text.lower()), text)])) == [
        ("we took the slow train", "all the way to New York"),
        ("and then we drove on to the coast.",),
    ]


def test_a_line_break_never_falls_inside_a_written_number_or_date():
    """ITN forms as the finals write them: "2" (written) then "million" (which spells its word),
    "March" then "5, 2020" (written): a line may start before the form, not inside it."""
    text = "The company said that it lost about 2 million customers in the last quarter."
    words = spoken("the company said that it lost about two million customers in the last quarter.")
    assert lines_of(caption([(words, text)])) == [
        ("The company said that it lost about", "2 million customers in the last quarter.")
    ]  # was "... 2" / "million ..."
    text = "the new rules came into force on March 5, 2020 for every company in the country."
    words = spoken(
        "the new rules came into force on march fifth twenty twenty for every company in the country."
    )
    assert lines_of(caption([(words, text)])) == [  # was "... force on March" / "5, 2020 for ..."
        ("the new rules came into force",),
        ("on March 5, 2020 for every", "company in the country."),
    ]


def test_a_number_in_digits_keeps_its_scale_or_unit_on_its_line():
    """An ASR that writes numbers in digits (Whisper) gives plain words "100" and "million": the
    test2011 run broke "... cost 100" / "million dollars ..." and "... 70 to 80" / "percent of ...";
    a scale or unit stays with its number as an ITN form's does. A number before another word is
    an ordinary word."""
    text = "We thought it would cost 100 million dollars to build so far."
    assert lines_of(caption([(spoken(text.lower()), text)])) == [
        ("We thought it would cost", "100 million dollars to build so far.")]
    text = "In fact, he said it was 70 to 80 percent of how we actually take care"
    assert lines_of(caption([(spoken(text.lower()), text)])) == [
        ("In fact, he said it was 70 to 80 percent", "of how we actually take care")]
    text = "We raised 2 million dollars in the first year."  # the number, its scale and its unit
    assert lines_of(caption([(spoken(text.lower()), text)])) == [
        ("We raised 2 million dollars", "in the first year.")]  # was "... 2 million" / "dollars ..."
    text = "We thought it would cost them 100 of their friends to build so far."
    assert lines_of(caption([(spoken(text.lower()), text)])) == [
        ("We thought it would cost them 100", "of their friends to build so far.")]


def test_a_form_longer_than_a_line_is_cut_as_a_long_word_is_and_the_forms_beside_it_are_not():
    """A written form longer than a line is cut where it must be (a word of it by characters, as a long
    word is; a phrase at its best space: after its comma); "$3 million." in the same cue stays whole
    (it was "... a total of $3" / "million.")."""
    money = Piece(
        "$3 million.",
        (
            TimedWord("three", O, 2.0, 2.2),
            TimedWord("million", O, 2.2, 2.4),
            TimedWord("dollars", PERIOD, 2.4, 2.6),
        ),
        written=True,
    )
    url = Piece(
        "www.united-nations-educational-organization.org", (TimedWord("unesco", O, 0.0, 0.5),), True
    )
    said = [
        Piece(w, (TimedWord(w, O, 0.5 + 0.2 * i, 0.7 + 0.2 * i),))
        for i, w in enumerate("and then gave them a total of".split())
    ]
    builder = CueBuilder(CueLimits(max_lines=3))
    cues = [c for p in [url, *said, money] for c in builder.add_piece(p)] + builder.close()
    assert [c.lines for c in cues] == [
        (
            "www.united-nations-educational-organizatio",
            "n.org and then gave",
            "them a total of $3 million.",
        )
    ]
    unesco = Piece(
        "United Nations Educational, Scientific and Cultural Organization",
        (TimedWord("unesco", O, 0.0, 0.5),),
        written=True,
    )
    assert layout([unesco, said[2], money], CueLimits()) == [
        "United Nations Educational, Scientific",
        "and Cultural Organization gave $3 million.",
    ]


FILLER = st.sampled_from("we went there and saw it all, so then you know. the a of".split())
#: Units as the finals' pieces show them (text, spoken words, written), each laid out on one line.
UNITS = [
    (("New", "new", False), ("York", "york", False)),  # a name
    (("Rio", "rio", False), ("de", "de", False), ("Janeiro", "janeiro", False)),  # a lexicon phrase
    (("$2", "two", True), ("million", "million", False)),  # an ITN form, its scale spelled
    (("March", "march", False), ("5, 2020", "fifth twenty twenty", True)),  # a written date
    (("$25", "twenty five dollars", True),),
]
PHRASES = [("rio", "de", "janeiro")]


@st.composite
def streams(draw):
    """Pieces: filler words (with their marks), and units of UNITS between them; the spans
    ``(start, end)`` of each unit's pieces in the stream."""
    pieces, spans, t = [], [], 0.0
    for _ in range(draw(st.integers(1, 40))):
        for token in [draw(FILLER)] * draw(st.integers(1, 3)):
            label = {",": COMMA, ".": PERIOD}.get(token[-1], O)
            pieces.append(Piece(token, (TimedWord(token.rstrip(",."), label, t, t + 0.3),)))
            t += 0.3
        first = len(pieces)
        for text, said, written in draw(st.sampled_from(UNITS)):
            words = tuple(
                TimedWord(w, O, t + 0.3 * i, t + 0.3 * (i + 1)) for i, w in enumerate(said.split())
            )
            pieces.append(Piece(text, words, written))
            t = words[-1].end
        spans.append((first, len(pieces)))
    return pieces, spans


@settings(max_examples=60, deadline=None)
@given(
    streams(),
    st.sampled_from([CueLimits(), CueLimits(max_chars=32), CueLimits(max_chars=32, max_lines=3)]),
)
def test_no_line_break_inside_a_written_form_or_a_phrase(stream, limits):
    pieces, spans = stream
    builder = CueBuilder(limits, phrases=PHRASES)
    cues = [cue for p in pieces for cue in builder.add_piece(p)] + builder.close()
    assert [p for c in cues for p in c.pieces] == pieces
    first = 0  # index of the cue's first piece in the stream
    for cue in cues:
        assert 1 <= len(cue.lines) <= limits.max_lines and all(
            len(line) <= limits.max_chars for line in cue.lines
        )
        assert " ".join(cue.lines) == " ".join(p.text for p in cue.pieces)  # nothing cut or lost
        # where each piece starts in the cue's text, and where its lines start
        offsets, at = [], 0
        for p in cue.pieces:
            offsets.append(at)
            at += len(p.text) + 1
        line_starts = {
            sum(len(line) + 1 for line in cue.lines[:i]) for i in range(1, len(cue.lines))
        }
        for s, e in spans:
            # a unit in this cue: not cut into lines
            if first <= s and e <= first + len(cue.pieces):
                inside = {offsets[k - first] for k in range(s + 1, e)}
                assert not inside & line_starts, (cue.lines, [p.text for p in pieces[s:e]])
        first += len(cue.pieces)


# -- a written form said across a long pause -----------------------------------------------------------


def test_a_form_said_across_a_pause_is_shown_when_it_is_complete():
    """A form said across a pause: "twenty", a pause of 8.8 s (longer than a cue lasts: the caption client writes what it holds),
    then "five dollars today.": the server holds "twenty" and writes "$25" with the words after
    the pause. Its cue starts with those words (it was shown from 1.0 s to 8.0 s, across the
    pause, and gone when "five dollars" was said); every rule holds, the lag counted from "five"."""
    words = spoken("it costs twenty") + spoken("five dollars today.", step=0.4, start=10.0)
    server = [(words[:2], "It costs"), (words[2:3], "", 1), "pause", (words[3:], "$25 today.")]
    one_final = [(words, "It costs $25 today.")]
    for finals in (server, one_final):
        cues = caption(finals).cues
        assert [(c.start, c.end, c.text) for c in cues] == [
            (0.0, 1.0, "It costs"),
            (10.0, 11.2, "$25 today."),
        ]
        assert [w.w for w in cues[1].words] == ["twenty", "five", "dollars", "today"]
        stats = cue_stats(cues)
        assert stats.lag_max_s == 0.0 and stats.short == stats.fast == stats.overlaps == 0
        assert all(c.duration >= 1.0 and c.chars / c.duration <= 17.0 for c in cues)


def test_when_a_forms_words_are_said_from():
    """A pause longer than ``pause_s`` inside the words moves their start after it; a shorter
    one (a form said slowly, shown from its first word as a long word is) does not."""
    slow = spoken("twenty") + spoken("five dollars", start=5.5)
    paused = spoken("twenty") + spoken("five", start=4.0) + spoken("dollars", start=12.0)
    assert said_from(slow, 7.0) == 0.0
    assert (
        said_from(paused, 7.0) == 12.0
        and said_from(paused, 3.0) == 12.0
        and said_from(paused, 10.0) == 0.0
    )


@st.composite
def paused_streams(draw):
    """Pieces: words, and written forms of 2-3 words with pauses of up to 12 s between their words."""
    out, t = [], 0.0
    for _ in range(draw(st.integers(1, 30))):
        size = draw(st.sampled_from([1, 1, 1, 2, 3]))
        label = draw(st.sampled_from([O, O, O, COMMA, PERIOD]))
        words = []
        for k in range(size):
            t += (
                draw(st.sampled_from([0.0, 0.2, 1.0, 8.0, 12.0]))
                if k
                else draw(st.sampled_from([0.0, 0.2, 1.5]))
            )
            words.append(
                TimedWord("twenty" if size > 1 else "so", label if k + 1 == size else O, t, t + 0.3)
            )
            t += 0.3
        text = ("$25" if size > 1 else "so") + {O: "", COMMA: ",", PERIOD: "."}[label]
        out.append(Piece(text, tuple(words), written=size > 1))
    return out


@settings(max_examples=60, deadline=None)
@given(
    paused_streams(), st.sampled_from([CueLimits(), CueLimits(max_duration_s=3.0, max_lag_s=0.5)])
)
def test_cues_of_forms_said_across_pauses_keep_every_rule(items, limits):
    """Duration, reading speed and overlaps as for any cue; the lag bound counted from the words
    said after the pause (:func:`said_from`), which the cue checker reports the same way."""
    builder = CueBuilder(limits)
    cues = [cue for p in items for cue in builder.add_piece(p)] + builder.close()
    assert [q for c in cues for q in c.pieces] == items
    for i, cue in enumerate(cues):
        assert cue.end > cue.start and (i == 0 or cue.start >= cues[i - 1].end - 1e-9)
        said = said_from(cue.words, limits.max_duration_s)
        # not shown across the pause, nor later than the lag allows after it
        assert said <= cue.start <= said + limits.max_lag_s + 1e-3 * i + 1e-9
        assert cue.end <= cue.pieces[-1].end + limits.max_lag_s + 1e-9
        assert cue.duration <= max(limits.max_duration_s, cue.chars / limits.max_cps) + 1e-9
        catching_up = cue.end >= cue.pieces[-1].end + limits.max_lag_s - 1e-9
        if not catching_up:  # reading speed and duration give way only to bound the lag
            assert cue.duration >= limits.min_duration_s - 1e-9 or i + 1 == len(cues)
            assert cue.chars / cue.duration <= limits.max_cps + 1e-6
    stats = cue_stats(cues, limits=limits)
    assert stats.overlaps == 0 and stats.lag_max_s <= limits.max_lag_s + 1e-3 * len(cues) + 1e-3
