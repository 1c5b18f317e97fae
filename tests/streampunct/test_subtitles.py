"""Subtitle cues: break rules, reading speed and duration, written forms from the finals' text,
properties over random streams, the checker, and files that real WebVTT / SRT parsers accept."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streampunct.client.subtitles import (
    Cue,
    CueBuilder,
    CueLimits,
    FinalPieces,
    Piece,
    SubtitleWriter,
    TimedWord,
    boundary,
    cue_stats,
    layout,
    main,
    read_cues_jsonl,
    wrap,
)
from streampunct.errors import InputError
from streampunct.labels import COMMA, PERIOD, QUESTION, O

webvtt = pytest.importorskip("webvtt", reason="needs webvtt-py (the dev extra)")
srt = pytest.importorskip("srt", reason="needs srt (the dev extra)")


def seconds(stamp: str) -> float:
    h, m, s = stamp.replace(",", ".").split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def timed(text: str, *, step: float = 0.4, start: float = 0.0) -> list[TimedWord]:
    """Words with marks attached ("hello," -> COMMA), one every ``step`` seconds."""
    out = []
    for i, token in enumerate(text.split()):
        mark = token[-1] if token[-1] in ",.?" else ""
        label = {"": O, ",": COMMA, ".": PERIOD, "?": QUESTION}[mark]
        t = start + i * step
        out.append(TimedWord(token.rstrip(",.?"), label, t, t + step * 0.8))
    return out


def build(words):
    builder = CueBuilder(CueLimits())
    cues = [cue for w in words for cue in builder.add(w)]
    return cues + builder.close()


def test_wrap_is_greedy_and_cuts_overlong_tokens():
    assert wrap(["aa", "bb", "cc"], 5) == ["aa bb", "cc"]
    assert wrap(["x" * 12], 5) == ["xxxxx", "xxxxx", "xx"]


def test_cues_break_at_sentence_ends_and_capitalize():
    cues = build(timed("so, this is it. is it working? yes it is"))
    assert [c.text for c in cues] == ["So, this is it.", "Is it working?", "Yes it is"]
    assert cues[0].start == 0.0 and cues[0].end == pytest.approx(3 * 0.4 + 0.32)
    assert cues[1].start == pytest.approx(4 * 0.4)


def test_cues_hold_two_lines_of_42_characters_and_seven_seconds():
    long = " ".join(["wonderful"] * 40)  # no sentence end at all
    cues = build(timed(long, step=0.1))
    assert len(cues) > 1
    for cue in cues:
        assert 1 <= len(cue.lines) <= 2 and all(len(line) <= 42 for line in cue.lines)
    slow = build(timed(" ".join(["a"] * 30), step=1.0))
    assert all(c.end - c.start <= 7.0 for c in slow) and len(slow) >= 4
    assert [w.w for c in slow for w in c.words] == ["a"] * 30  # nothing lost or repeated


def test_short_sentences_are_merged_and_shown_at_least_a_second():
    words = [TimedWord(w, PERIOD, 1.0, 1.0) for w in ("one", "two", "three")]  # no durations
    (cue,) = build(words)
    assert (cue.start, cue.end, cue.text) == (1.0, 2.0, "One. Two. Three.")


def test_vtt_and_srt_files_parse_with_real_parsers():
    words = timed("hello there, how are you today? i am fine thank you. " + "and so on " * 12, step=0.35)
    vtt, srt_out, jsonl = io.StringIO(), io.StringIO(), io.StringIO()
    for fmt, out in (("vtt", vtt), ("srt", srt_out), ("jsonl", jsonl)):
        writer = SubtitleWriter(fmt, [out])
        for w in words:
            writer.add(w)
        writer.close()
    captions = list(webvtt.from_buffer(io.StringIO(vtt.getvalue())))
    assert captions[0].text == "Hello there, how are you today?"
    assert captions[1].text == "I am fine thank you."
    assert len(captions) >= 4
    for c in captions:
        start, end = seconds(c.start), seconds(c.end)
        assert 0 <= start < end and end - start <= 7.0
        assert all(len(line) <= 42 for line in c.text.split("\n")) and len(c.text.split("\n")) <= 2
    subs = list(srt.parse(srt_out.getvalue()))
    assert [s.content for s in subs] == [c.text for c in captions]
    assert [s.index for s in subs] == list(range(1, len(subs) + 1))
    assert [s.start.total_seconds() for s in subs] == pytest.approx([seconds(c.start) for c in captions])
    records = [json.loads(line) for line in jsonl.getvalue().splitlines()]
    assert [r["text"] for r in records] == [c.text.replace("\n", " ") for c in captions]
    assert [w["w"] for r in records for w in r["words"]] == [w.w for w in words]


# -- reading speed, duration, merging ------------------------------------------------------------


def pieces(text: str, *, step: float = 0.4, start: float = 0.0, written: dict[str, int] | None = None) -> list[Piece]:
    """Pieces shown as ``text`` (tokens), one word each, but ``written`` tokens (token -> words)."""
    out, t = [], start
    for token in text.split():
        mark = token[-1] if token[-1] in ",.?" else ""
        label = {"": O, ",": COMMA, ".": PERIOD, "?": QUESTION}[mark]
        n = (written or {}).get(token, 1)
        words = tuple(TimedWord(token.rstrip(",.?").lower() if n == 1 else f"w{k}", O if k + 1 < n else label,
                                t + k * step, t + (k + 1) * step) for k in range(n))
        out.append(Piece(token, words, written=token in (written or {})))
        t += n * step
    return out


def feed(items, limits: CueLimits | None = None) -> list[Cue]:
    builder = CueBuilder(limits or CueLimits())
    cues = [cue for p in items for cue in builder.add_piece(p)]
    return cues + builder.close()


def test_a_fast_cue_is_shown_long_enough_to_read_and_pushes_the_next():
    # 44 characters said in 1.2 s: shown 44/17 s, and the next cue starts when it ends
    first = pieces("Extraordinarily, unbelievably, unimaginably.", step=0.4)
    rest = pieces("and then it was over, really over and done with.", start=1.2)
    cues = feed(first + rest)
    assert cues[0].lines == ("Extraordinarily,", "unbelievably, unimaginably.")
    assert cues[0].end == pytest.approx(44 / 17.0)
    assert cues[1].start == pytest.approx(cues[0].end)
    assert all(c.chars / c.duration <= 17.0 + 1e-9 for c in cues)


SPEECH = ("so today we are going to talk about the history of the city, and how it grew over the last "
          "two hundred years from a small village to a large town. it was not always easy. the river flooded "
          "almost every spring, and the people who lived near it moved again and again. yes. but they stayed, "
          "because the land was good and the market brought traders from far away.")


def continuous(wps: float, seconds: float) -> list[TimedWord]:
    """Speech with no pause: word k said from k/wps to (k+1)/wps, for ``seconds``."""
    base = timed(SPEECH)
    return [TimedWord(base[k % len(base)].w, base[k % len(base)].label, k / wps, (k + 1) / wps)
            for k in range(int(wps * seconds))]


@pytest.mark.parametrize(("wps", "max_lag_s"), [(3.5, 1.5), (4.0, 1.5), (4.0, 0.5)])
def test_fast_speech_keeps_the_lag_bounded(wps, max_lag_s):
    # ~20-23 characters a second for 10 minutes: cues shown for 17/s fell minutes behind
    words = continuous(wps, 600)
    limits = CueLimits(max_lag_s=max_lag_s)
    builder = CueBuilder(limits)
    cues = [cue for w in words for cue in builder.add(w)] + builder.close()
    assert [w for c in cues for w in c.words] == words
    assert max(c.start - c.words[0].start for c in cues) <= max_lag_s + 1e-9
    assert all(c.end - c.words[-1].end <= max_lag_s + 1e-9 for c in cues)
    assert all(c.duration > 0 for c in cues)
    assert all(b.start >= a.end - 1e-9 for a, b in zip(cues, cues[1:], strict=False))
    assert cues[-1].end <= words[-1].end + max_lag_s + 1e-9
    assert CueLimits().max_lag_s == 1.5  # the documented default


def test_speech_slow_enough_to_read_is_not_hurried_by_the_lag_bound():
    cues = build(continuous(2.0, 120))
    assert all(c.chars / c.duration <= 17.0 + 1e-9 and c.duration >= 1.0 for c in cues[:-1])


def test_words_sharing_a_long_segment_time_are_not_one_cue_each():
    # a segment without word timestamps read as before: every word with the segment's 8.5 s
    words = [TimedWord(w.w, w.label, 11.0, 19.5) for w in timed("we choose to go to the moon in this decade "
                                                                 "and do the other things, not because "
                                                                 "they are easy.")]
    cues = build(words)
    assert len(cues) <= 3 and all(len(c.words) > 1 for c in cues)
    assert [w for c in cues for w in c.words] == words
    assert all(c.duration > 0 for c in cues) and cues[-1].end <= 19.5 + 1.5


def test_a_word_too_long_for_a_cue_is_cut_with_an_ellipsis():
    long = "x" * 100
    cues = build(timed(f"so {long} and then we went home."))
    assert all(len(c.lines) <= 2 and all(len(line) <= 42 for line in c.lines) for c in cues)
    (cut,) = [c for c in cues if any("x" in line for line in c.lines)]
    assert cut.lines == ("x" * 42, "x" * 41 + "\u2026")
    assert [w.w for w in cut.words] == [long]  # the words keep it whole


def test_vtt_cue_text_is_escaped_and_srt_is_written_as_shown():
    text = "AT&T <b> x<y a-->b"
    outs = {}
    for fmt in ("vtt", "srt"):
        outs[fmt] = io.StringIO()
        writer = SubtitleWriter(fmt, [outs[fmt]])
        writer.add_final(spoken("at and t b x y a b."), text)
        writer.close()
    vtt = outs["vtt"].getvalue()
    assert "AT&amp;T &lt;b&gt; x&lt;y\na--&gt;b\n" in vtt or "AT&amp;T &lt;b&gt; x&lt;y a--&gt;b\n" in vtt
    assert vtt.count("-->") == 1  # the timing line's only
    (caption,) = webvtt.from_buffer(io.StringIO(vtt))
    assert caption.raw_text.replace("\n", " ") == "AT&amp;T &lt;b&gt; x&lt;y a--&gt;b"
    (sub,) = srt.parse(outs["srt"].getvalue())
    assert sub.content.replace("\n", " ") == text


def test_srt_cannot_write_100_hours_and_vtt_can():
    words = [TimedWord("hello", PERIOD, 360_000.0, 360_000.5)]
    out = io.StringIO()
    writer = SubtitleWriter("vtt", [out])
    writer.add(words[0])
    writer.close()
    assert "100:00:00.000 --> 100:00:01.000\nHello.\n" in out.getvalue()
    writer = SubtitleWriter("srt", [io.StringIO()])
    with pytest.raises(InputError, match=r"subtitle cue 1: a time of 100:00:01,000 cannot be written in SRT"):
        writer.add(words[0])
        writer.close()
    writer = SubtitleWriter("srt", [out := io.StringIO()])
    writer.add(TimedWord("hello", PERIOD, 359_990.0, 359_990.5))
    writer.close()
    assert "99:59:50,000 --> 99:59:51,000" in out.getvalue()


def test_a_short_tail_of_a_long_sentence_is_not_left_alone():
    # The "San Francisco." left over: the long sentence is cut where both halves read well
    text = ("we spent most of the last two years building a small company that makes tools for "
            "people in san francisco.")
    cues = build(timed(text, step=0.3))
    assert len(cues) == 2
    assert all(len(c.words) >= 5 for c in cues)
    assert cues[-1].text.endswith("san francisco.")


def test_a_short_sentence_joins_the_next_when_both_fit():
    cues = build(timed("yes. we did it all ourselves.", step=0.3))
    assert [c.text for c in cues] == ["Yes. We did it all ourselves."]


def test_cues_are_written_as_they_complete_and_a_pause_flushes_what_is_held():
    builder = CueBuilder()
    words = timed("so this is the first sentence we say. and then", step=0.4)
    written = [builder.add(w) for w in words]
    assert [len(c) for c in written] == [0] * 7 + [1, 0, 0]  # at the sentence end, not later
    assert builder.pending == 2
    (held,) = builder.flush()  # no final for as long as a cue lasts: written as it is
    assert held.text == "And then" and held.duration >= 1.0 and builder.pending == 0


def test_words_are_held_no_longer_than_a_cue_lasts():
    limits = CueLimits(max_duration_s=3.0)
    cues = feed(pieces(" ".join(["word"] * 30), step=0.5), limits)
    assert all(c.words[-1].end - c.words[0].start <= 3.0 for c in cues)


# -- names and written forms -----------------------------------------------------------------------


def test_no_cue_break_inside_a_name_or_next_to_a_written_form():
    one_line = CueLimits(max_chars=20, max_lines=1)
    # "we all moved to New" fills the line; the cue breaks before the name instead
    cues = feed(pieces("we all moved to New York"), one_line)
    assert [c.text for c in cues] == ["we all moved", "to New York"]
    assert cue_stats(cues).name_breaks == 0
    # "$3 million" (one written form of "three million dollars") is not cut from "of" either
    money = pieces("we got a grant of $3 million", written={"$3": 2})
    money[-2:] = [Piece("$3 million", money[-2].words + money[-1].words, written=True)]
    cues = feed(money, one_line)
    assert [c.text for c in cues] == ["we got a grant", "of $3 million"]
    # a mark between them allows it
    cues = feed(pieces("so we went there, New York was great"), CueLimits(max_chars=18, max_lines=1))
    assert cues[0].text == "so we went there,"


def test_lines_are_balanced_and_break_after_punctuation():
    cue = feed(pieces("Bj, so every moment it's on the stage, it's making the struggle."))[0]
    assert cue.lines == ("Bj, so every moment it's on the stage,", "it's making the struggle.")
    lines = layout(pieces("we went to the shops and bought a lot of things for the party tomorrow"), CueLimits())
    assert len(lines) == 2 and abs(len(lines[0]) - len(lines[1])) <= 10
    assert not lines[0].endswith((" the", " a", " of", " to"))


def test_no_one_word_last_line_when_avoidable():
    lines = layout(pieces("this line of text is long enough to need a second line for its last word"),
                   CueLimits(max_chars=40))
    assert len(lines) == 2 and len(lines[1].split()) > 1


# -- pieces from the finals' text -----------------------------------------------------------------


def spoken(text: str, *, step: float = 0.4) -> list[TimedWord]:
    return [TimedWord(w.rstrip(",.?"), {",": COMMA, ".": PERIOD, "?": QUESTION}.get(w[-1], O), i * step,
                      (i + 1) * step) for i, w in enumerate(text.split())]


def run_finals(finals: list[tuple[list[TimedWord], str]]) -> list[Piece]:
    aligner = FinalPieces()
    out = [p for words, text in finals for p in aligner.add(words, text)]
    return out + aligner.close()


def test_written_forms_from_the_finals_text_across_finals():
    ws = spoken("it costs three million dollars today. we met on march fifth twenty twenty in new york.")
    finals = [(ws[0:2], "It costs"), (ws[2:4], ""), (ws[4:6], "$3 million today."), (ws[6:9], "We met on"),
              (ws[9:12], ""), (ws[12:16], "March 5, 2020 in New York.")]
    shown = [(p.text, " ".join(w.w for w in p.words), p.written) for p in run_finals(finals)]
    assert shown == [("It", "it", False), ("costs", "costs", False),
                     ("$3 million", "three million dollars", True), ("today.", "today", False),
                     ("We", "we", False), ("met", "met", False), ("on", "on", False), ("March", "march", False),
                     ("5, 2020", "fifth twenty twenty", True), ("in", "in", False), ("New", "new", False),
                     ("York.", "york", False)]


def test_a_form_with_its_own_mark_is_a_sentence_break():
    yahoo = Piece("Yahoo!", (TimedWord("yahoo", PERIOD, 0.0, 0.4),), written=True)
    then = Piece("Then", (TimedWord("then", O, 0.4, 0.8),))
    assert boundary(yahoo, then) == "sentence"


def test_symbols_without_a_word_stay_with_the_word_they_follow():
    """A unit after a number belongs to the number, symbols after the last word to that
    word; a sign before a number still goes with the number."""
    ws = spoken("it rose 50. today we pay 20. ok.")
    finals = [(ws[0:3], "It rose 50 %."), (ws[3:7], "Today we pay $"), (ws[7:8], "20."), (ws[8:9], "OK. \U0001f600")]
    shown = [(p.text, " ".join(w.w for w in p.words)) for p in run_finals(finals)]
    assert shown == [("It", "it"), ("rose", "rose"), ("50 %.", "50"), ("Today", "today"), ("we", "we"),
                     ("pay", "pay"), ("$ 20.", "20"), ("OK. \U0001f600", "ok")]
    writer = SubtitleWriter("jsonl", [io.StringIO()])
    for words, text in finals:
        writer.add_final(words, text)
    writer.close()
    assert " ".join(c.text for c in writer.cues).split() == " ".join(text for _, text in finals).split()
    # a pause before the number: the sign still waits for it (it ends only this text, not the stream)
    aligner = FinalPieces()
    shown = aligner.add(ws[3:6], "Today we pay $") + aligner.settle() + aligner.add(ws[6:7], "20.") + aligner.close()
    assert [p.text for p in shown] == ["Today", "we", "pay", "$ 20."]


def test_a_pause_writes_what_the_texts_wrote_and_keeps_the_held_words_for_their_text():
    """Words a final held for a phrase ("on" | "march", a pause, "fifth at noon") are not
    written as spoken at the pause: the final that writes the phrase shows them, once."""
    ws = spoken("we will meet on march fifth at noon.")
    writer = SubtitleWriter("jsonl", [io.StringIO()])
    writer.add_final(ws[:4], "We will meet on")
    writer.add_final(ws[4:5], "", held=1)  # "march" may open a date
    writer.flush()  # no final for as long as a cue lasts
    assert [c.text for c in writer.cues] == ["We will meet on"] and writer.pending
    writer.add_final(ws[5:8], "March 5 at noon.")
    writer.close()
    assert [c.text for c in writer.cues] == ["We will meet on", "March 5 at noon."]
    assert [[w.w for w in c.words] for c in writer.cues] == [["we", "will", "meet", "on"],
                                                             ["march", "fifth", "at", "noon"]]
    assert [(p.text, len(p.words)) for p in writer.cues[1].pieces] == [("March", 1), ("5", 1), ("at", 1),
                                                                       ("noon.", 1)]


def test_a_mark_a_written_form_took_inside_is_not_a_clause_break():
    """The model's comma after "april" went inside the date the server wrote ("April 25,"):
    a cue cut there would cut the date. A long cue must break elsewhere."""
    filler = "we walked all the way along the old river path to the park near the"
    ws = spoken(f"{filler} on april, twenty fifth, they said.", step=0.4)
    n = len(filler.split())
    text = f"{filler.capitalize()} on April 25, they said."
    writer = SubtitleWriter("jsonl", [io.StringIO()], CueBuilder(CueLimits(max_chars=40)))
    writer.add_final(ws, text)
    writer.close()
    shown = [" ".join(c.lines) for c in writer.cues]
    assert not any(t.endswith("April") for t in shown), shown
    assert any("April 25," in t for t in shown) and [w for c in writer.cues for w in c.words] == ws
    assert ws[n + 1].w == "april" and ws[n + 1].label == COMMA


def test_a_lexicon_phrase_that_spells_its_words_is_not_cut_between_cues():
    """A lexicon form that only changes case ("Rio de Janeiro") is plain pieces; the builder,
    told the lexicon's phrases, keeps it in one cue where another break fits."""
    words = spoken("my friends and i went to visit our old family in rio de janeiro last year.", step=0.4)
    text = "My friends and I went to visit our old family in Rio de Janeiro last year."

    def cues(phrases):
        writer = SubtitleWriter("jsonl", [io.StringIO()], CueBuilder(CueLimits(max_chars=20), phrases=phrases))
        writer.add_final(words, text)
        writer.close()
        return [" ".join(c.lines) for c in writer.cues]

    plain = cues(())
    assert any(t.endswith("Rio") or t.endswith("de") for t in plain), plain  # what the phrase avoids
    kept = cues([("rio", "de", "janeiro"), ("new", "york")])
    assert any("Rio de Janeiro" in t for t in kept), kept
    assert " ".join(kept) == text


def test_clitics_and_lexicon_forms_that_spell_their_words_are_one_piece():
    ws = spoken("it 's an i phone from nasa")
    shown = [(p.text, len(p.words), p.written) for p in run_finals([(ws, "It's an iPhone from N.A.S.A.")])]
    assert shown == [("It's", 2, False), ("an", 1, False), ("iPhone", 2, False), ("from", 1, False),
                     ("N.A.S.A.", 1, True)]


def test_capitals_that_change_a_letter_or_the_length_still_spell_their_word():
    """"Irmak" writes "ırmak" (Turkish dotless i), "STRASSE" writes "straße": plain pieces, not
    written forms (which would hold cue breaks around them)."""
    ws = spoken("ırmak saw the straße today.")
    shown = [(p.text, p.written) for p in run_finals([(ws, "Irmak saw the STRASSE today.")])]
    assert shown == [("Irmak", False), ("saw", False), ("the", False), ("STRASSE", False), ("today.", False)]


def test_the_caption_writer_shows_the_servers_text():
    out = io.StringIO()
    writer = SubtitleWriter("vtt", [out])
    ws = spoken("it costs twenty five dollars today.", step=0.5)
    writer.add_final(ws[:2], "It costs")
    writer.add_final(ws[2:4], "")
    writer.add_final(ws[4:], "$25 today.")
    writer.close()
    assert [c.text for c in writer.cues] == ["It costs $25 today."]
    assert [w.w for w in writer.cues[0].words] == "it costs twenty five dollars today".split()


# -- properties over random streams ------------------------------------------------------------------

WORDS = st.sampled_from("a the of and we so it is was new york paris extraordinarily i".split())


@st.composite
def streams(draw):
    """Pieces: words (some capitalized, some with marks), some written forms of 1-3 words, times
    that never go back (gaps and words without duration included)."""
    n = draw(st.integers(1, 60))
    out, t = [], draw(st.floats(0, 5))
    for _ in range(n):
        size = draw(st.sampled_from([1, 1, 1, 1, 2, 3]))
        written = size > 1 or draw(st.booleans()) and draw(st.booleans())
        label = draw(st.sampled_from([O, O, O, O, COMMA, PERIOD, QUESTION]))
        words = []
        for k in range(size):
            t += draw(st.sampled_from([0.0, 0.1, 0.3, 0.4, 1.5]))
            length = draw(st.sampled_from([0.0, 0.2, 0.4]))
            words.append(TimedWord(draw(WORDS), label if k + 1 == size else O, t, t + length))
            t += length
        text = "$" + str(draw(st.integers(1, 10**6))) if written else words[0].w
        if not written and draw(st.booleans()):
            text = text.capitalize()
        out.append(Piece(text + {O: "", COMMA: ",", PERIOD: ".", QUESTION: "?"}[label], tuple(words), written))
    return out


@settings(max_examples=300, deadline=None)
@given(streams(), st.sampled_from([CueLimits(), CueLimits(max_chars=20), CueLimits(max_lines=1, max_duration_s=3.0),
                                   CueLimits(max_lag_s=0.3)]))
def test_cue_properties(items, limits):
    builder = CueBuilder(limits)
    cues, held_over = [], 0.0
    for p in items:
        cues += builder.add_piece(p)
        pending = builder._pending
        if len(pending) > 1:  # never holds more than a cue may last (or than one piece alone takes)
            longest = max(limits.max_duration_s, *(q.end - q.start for q in pending))
            held_over = max(held_over, pending[-1].end - pending[0].start - longest)
    cues += builder.close()
    assert held_over <= 1e-9
    # no word lost or repeated, in order
    assert [w for c in cues for w in c.words] == [w for p in items for w in p.words]
    assert [q for c in cues for q in c.pieces] == items
    for i, cue in enumerate(cues):
        assert cue.end > cue.start
        if i:
            assert cue.start >= cues[i - 1].end - 1e-9  # monotonic, not overlapping
        # lag bounded (times never go back here): at most a millisecond more after each cue with no
        # time left to be shown at all (words said at one instant, the lag used up)
        assert cue.start - cue.words[0].start <= limits.max_lag_s + 1e-3 * i + 1e-9
        catching_up = cue.end >= cue.pieces[-1].end + limits.max_lag_s - 1e-9
        if not catching_up:  # reading speed and duration give way only to bound the lag
            assert cue.duration >= 0.8 or i + 1 == len(cues)
            assert cue.chars / cue.duration <= limits.max_cps + 1e-6
        assert all(len(line) <= limits.max_chars for line in cue.lines)
        assert len(cue.lines) <= limits.max_lines
    stats = cue_stats(cues, limits=limits)
    assert stats.overlaps == stats.long_lines == stats.over_lines == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(WORDS, st.sampled_from(["", "", ",", "."]), st.integers(0, 2)), min_size=1, max_size=40),
       st.lists(st.integers(1, 5), min_size=40, max_size=40))
def test_pieces_cover_every_word_once_whatever_the_finals(items, cuts):
    """Random texts with written forms (a word written as a number, or two as one) split into finals
    at random, with written forms held by the final that ends them: every word in one piece, in
    order, and the pieces' texts are the finals' texts."""
    words, tokens = [], []  # tokens: (text, words it writes)
    t = 0.0
    for i, (w, mark, kind) in enumerate(items):
        label = {"": O, ",": COMMA, ".": PERIOD}[mark]
        if kind == 2 and i + 1 < len(items):  # two words written as one number
            pair = [TimedWord(w, O, t, t + 0.3), TimedWord(w + "s", label, t + 0.3, t + 0.6)]
            words += pair
            tokens.append((f"{i}{i}" + mark, 2))
            t += 0.6
            continue
        words.append(TimedWord(w, label, t, t + 0.3))
        tokens.append((str(i) + mark if kind == 1 else w + mark, 1))
        t += 0.3
    finals, k, used = [], 0, 0
    for cut in cuts:
        if used >= len(tokens):
            break
        take = tokens[used:used + cut]
        n = sum(size for _, size in take)
        finals.append((words[k:k + n], " ".join(text for text, _ in take)))
        k, used = k + n, used + len(take)
    got = run_finals(finals)
    assert [w for p in got for w in p.words] == words
    assert " ".join(p.text for p in got) == " ".join(text for _, text in finals if text)


# -- the checker ----------------------------------------------------------------------------------------


def test_cue_stats_counts_what_breaks_the_rules():
    w = [TimedWord(x, O, i, i + 0.5) for i, x in enumerate("new york is big".split())]
    cues = [
        Cue(0.0, 0.5, ("New",), (w[0],), (Piece("New", (w[0],)),)),  # short, and a name cut after it
        Cue(0.5, 1.0, ("York is a very long line here",), (w[1], w[2]), (Piece("York", (w[1],)), Piece("is", (w[2],)))),
        Cue(1.0, 1.2, ("big",), (w[3],), (Piece("big", (w[3],)),)),  # short, but the last
    ]
    stats = cue_stats(cues, [(0, 2), (2, 4)])
    assert (stats.cues, stats.short, stats.fast, stats.name_breaks, stats.span_breaks, stats.spans) == (3, 2, 1, 1, 2, 2)
    assert stats.max_cps == pytest.approx(29 / 0.5)
    assert "3 cues; under 0.8 s (but the last): 2 (66.7%)" in stats.format()


def test_jsonl_cues_read_back_and_the_checker_command(tmp_path, capsys):
    out = io.StringIO()
    writer = SubtitleWriter("jsonl", [out])
    ws = spoken("we flew to new york for nasa. it cost three million dollars in all.")
    writer.add_final(ws[:8], "We flew to New York for NASA. It")
    writer.add_final(ws[8:], "cost $3 million in all.")
    writer.close()
    back = read_cues_jsonl(out.getvalue().splitlines())
    assert [(c.start, c.end, c.lines) for c in back] == [
        (round(c.start, 3), round(c.end, 3), c.lines) for c in writer.cues]
    assert [p for c in back for p in c.pieces] == [p for c in writer.cues for p in c.pieces]
    path = tmp_path / "cues.jsonl"
    path.write_text(out.getvalue(), encoding="utf-8")
    lexicon = tmp_path / "lexicon.tsv"
    lexicon.write_text("new york\tNew York\nnasa\tNASA\n", encoding="utf-8")
    assert main([str(path), "--lexicon", str(lexicon)]) == 0
    printed = capsys.readouterr().out
    assert "boundaries inside names: 0, inside written forms or lexicon phrases: 0 of 1;" in printed


async def test_caption_writes_a_held_cue_during_a_pause(start_server, fake_labels):
    """Through a server: words held for a cue are written when no final completed it for
    max_duration_s (wall time), before the speaker goes on."""
    import asyncio

    from streampunct.client.caption import caption
    from streampunct.client.caption_input import AsrEvent
    from streampunct.core.wire import Word

    first, later = "so and then the".split(), ["home"]
    assert not any(label in (PERIOD, QUESTION) for label in fake_labels(first))  # nothing ends the cue
    server = await start_server()
    cue_written = asyncio.Event()

    class Watched(io.StringIO):
        def write(self, text: str) -> int:
            if "-->" in text:
                cue_written.set()
            return super().write(text)

    async def events():
        yield AsrEvent(None, tuple(Word(w) for w in first))
        # The speaker pauses until the held cue is written: a cue that waits for the next final
        # (or for "home") never comes, and the test fails here.
        await asyncio.wait_for(cue_written.wait(), 30)
        yield AsrEvent(None, tuple(Word(w) for w in later))

    out = Watched()
    writer = SubtitleWriter("vtt", [out], CueBuilder(CueLimits(min_duration_s=0.2, max_duration_s=0.5)))
    await caption(server.url, events=events(), right_context=1, max_delay_ms=100, partials=False,
                  subtitles=writer)
    assert writer.cues[0].text.lower() == "so and then the"
    assert [w.w for c in writer.cues for w in c.words] == first + later


def test_a_clitic_that_opens_a_final_joins_the_word_before():
    ws = spoken("i 'm here and there 's they do n't know")
    finals = [(ws[:1], "I"), (ws[1:5], "'m here and there"), (ws[5:6], "'s"), (ws[6:8], "they do"),
              (ws[8:], "n't know")]
    writer = SubtitleWriter("jsonl", [io.StringIO()])
    for words, text in finals:
        writer.add_final(words, text)
    writer.close()
    assert [p.text for c in writer.cues for p in c.pieces] == ["I'm", "here", "and", "there's", "they", "don't",
                                                              "know"]


def test_the_cue_checker_names_the_file_and_line_of_a_bad_record(tmp_path, capsys):
    from streampunct.client.subtitles import main

    f = tmp_path / "cues.jsonl"
    f.write_text('\n{"a": 1}\n')
    with pytest.raises(SystemExit) as done:
        main([str(f)])
    assert done.value.code == 2
    assert f"error: {f}:2: not a cue of caption --format jsonl (no 'words')" in capsys.readouterr().err
    srt = tmp_path / "cues.srt"
    srt.write_text("1\n00:00:01,000 --> 00:00:02,000\nHello.\n")
    with pytest.raises(SystemExit):
        main([str(srt)])
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        f"error: {srt}:1: not a cue of caption --format jsonl (a JSON object a line; SRT and WebVTT files are "
        "not read here)")
    with pytest.raises(SystemExit):
        main([str(tmp_path / "missing.jsonl")])
    assert "no such file" in capsys.readouterr().err


def test_cues_of_word_times_before_0_keep_their_times():
    """jsonl cues carry word times before 0 (an offset clock) as they are: the first cue is
    not pulled to 0 (it used to start at 0 and, past the lag bound, show for 1 ms)."""
    cues = build(timed("so today we talk about the river. it flooded every spring.", start=-10.0))
    assert cues[0].start == pytest.approx(-10.0)
    assert all(c.duration >= CueLimits().min_duration_s - 1e-9 for c in cues)
    assert all(a.end <= b.start for a, b in zip(cues, cues[1:], strict=False))


PARTY = "\U0001f389"


@pytest.mark.parametrize("fmt", ["srt", "vtt", "jsonl"])
def test_symbols_no_word_took_make_a_last_cue_of_their_own(fmt):
    """Finals of symbols alone ("🎉 & 🎉": no words, so no times) are shown in the captions;
    the subtitles show them too, in a cue after the last one (at 0 when there is none), for as
    long as reading takes, instead of an empty file. Symbols after a pause, with no word after
    them, likewise: their word before is in a cue already."""
    out = io.StringIO()
    writer = SubtitleWriter(fmt, [out])
    writer.add_final([], f"{PARTY} & {PARTY}")
    writer.close()
    assert [(c.start, c.end, c.lines, c.words) for c in writer.cues] == [(0.0, 1.0, (f"{PARTY} & {PARTY}",), ())]
    written = out.getvalue()
    if fmt == "srt":
        assert written == f"1\n00:00:00,000 --> 00:00:01,000\n{PARTY} & {PARTY}\n\n"
        assert [c.content for c in srt.parse(written)] == [f"{PARTY} & {PARTY}"]
    elif fmt == "vtt":
        assert written == f"WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n{PARTY} &amp; {PARTY}\n\n"
    else:
        back = read_cues_jsonl(written.splitlines())
        assert [(c.start, c.end, c.lines, c.words) for c in back] == [(0.0, 1.0, (f"{PARTY} & {PARTY}",), ())]
        assert cue_stats(back).cues == 1

    writer = SubtitleWriter(fmt, [io.StringIO()])
    writer.add_final(spoken("hello there."), "Hello there.")
    writer.flush()  # a pause: "Hello there." is a cue
    writer.add_final([], PARTY)
    writer.close()
    assert [(c.text, c.start, c.end) for c in writer.cues] == [("Hello there.", 0.0, 1.0), (PARTY, 1.0, 2.0)]


def test_symbols_that_a_word_follows_or_ends_still_go_with_that_word():
    """Only symbols no word took make a cue of their own: before a word they go with it, at the
    end of a stream with the word before them when it is not in a cue yet."""
    writer = SubtitleWriter("jsonl", [io.StringIO()])
    writer.add_final([], PARTY)
    writer.add_final(spoken("hello there."), "Hello there.")
    writer.add_final([], PARTY)
    writer.close()
    assert [c.text for c in writer.cues] == [f"{PARTY} Hello there. {PARTY}"]
    assert [p.text for c in writer.cues for p in c.pieces] == [f"{PARTY} Hello", f"there. {PARTY}"]


def test_symbols_no_word_took_that_fill_more_than_a_cue_make_cues_of_their_own_none_cut():
    """60 symbols alone fill three lines of 42 characters: two cues (two lines, then one), one
    after the other, with every symbol; they were cut to one cue of two lines ending in "…"."""
    writer = SubtitleWriter("srt", [io.StringIO()])
    writer.add_final([], " ".join(["&"] * 60))
    writer.close()
    row = " ".join(["&"] * 21)
    assert [c.lines for c in writer.cues] == [(row, row), (" ".join(["&"] * 18),)]
    assert writer.cues[0].start == 0.0 and writer.cues[0].end == writer.cues[1].start
    assert all(c.duration >= CueLimits().min_duration_s for c in writer.cues)

async def test_caption_srt_of_a_transcript_of_symbols_alone_is_not_empty(start_server, tmp_path):
    """``caption --format srt --out`` of "🎉 & 🎉" writes the cue that ``--format text`` shows as
    text (it wrote an empty file)."""
    import asyncio
    import sys

    server = await start_server()
    source, out = tmp_path / "e.txt", tmp_path / "e.srt"
    source.write_text(f"{PARTY} & {PARTY}\n", encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", "caption", str(source), "--url", server.url, "--format", "srt",
        "--out", str(out), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, stderr.decode()
    expected = f"1\n00:00:00,000 --> 00:00:01,000\n{PARTY} & {PARTY}\n\n"
    assert out.read_text(encoding="utf-8") == expected
    assert stdout.decode("utf-8") == expected
