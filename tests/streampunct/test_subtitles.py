"""Subtitle cues: break rules, and files that real WebVTT / SRT parsers accept."""

from __future__ import annotations

import io
import json

import pytest

from streampunct.labels import COMMA, PERIOD, QUESTION, O
from streampunct.subtitles import CueBuilder, CueLimits, SubtitleWriter, TimedWord, wrap

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


def test_cues_never_overlap_and_last_at_least_the_minimum():
    words = [TimedWord(w, PERIOD, 1.0, 1.0) for w in ("one", "two", "three")]  # no durations
    cues = build(words)
    assert [(c.start, c.end) for c in cues] == [(1.0, 1.5), (1.5, 2.0), (2.0, 2.5)]


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
