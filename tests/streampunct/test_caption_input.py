"""Input adapters of ``streampunct caption``: text, JSON lines of words, Vosk, faster-whisper."""

from __future__ import annotations

import json

import pytest

from streampunct.caption_input import AsrEvent, detect_format, read_events
from streampunct.errors import InputError
from streampunct.protocol import Word


def write_lines(path, objects):
    path.write_text("".join(json.dumps(o) + "\n" for o in objects), encoding="utf-8")
    return path


def test_detect_format():
    assert detect_format("hello there") == "text"
    assert detect_format('{"w": "hi", "start": 0.1, "end": 0.3}') == "words"
    assert detect_format('{"word": "hi", "start": 0.1}') == "words"
    assert detect_format('{"partial": "hel"}') == "vosk"
    assert detect_format('{"result": [], "text": ""}') == "vosk"
    assert detect_format('{"start": 0, "end": 2, "text": "hi", "words": []}') == "whisper"
    assert detect_format('[{"start": 0, "end": 2, "text": "hi", "words": []}]') == "whisper"
    with pytest.raises(InputError):
        detect_format('{"foo": 1}')


def test_json_lines_of_words_are_timed_by_their_end(tmp_path):
    f = write_lines(tmp_path / "w.jsonl", [
        {"w": "so", "start": 10.0, "end": 10.2}, {"word": "today", "start": 10.3, "end": 10.9},
    ])
    events = read_events(str(f), speed=1.0)
    assert events == [
        AsrEvent(0.0, (Word("so", 10.0, 10.2),)),
        AsrEvent(pytest.approx(0.7), (Word("today", 10.3, 10.9),)),
    ]
    fast = read_events(str(f), speed=0)
    assert [e.at for e in fast] == [0.0, 0.0]


def test_vosk_results_commit_and_partials_become_hypotheses(tmp_path):
    f = write_lines(tmp_path / "vosk.jsonl", [
        {"partial": ""},
        {"partial": "so how"},
        {"result": [{"conf": 1.0, "word": "so", "start": 0.5, "end": 0.7},
                    {"conf": 0.9, "word": "how", "start": 0.8, "end": 1.0}], "text": "so how"},
        {"partial": "are"},
        {"text": ""},
    ])
    events = read_events(str(f), input_format="vosk", speed=2.0)
    assert [(e.interim, [w.w for w in e.words]) for e in events] == [
        (True, []), (True, ["so", "how"]), (False, ["so", "how"]), (True, ["are"]),
    ]
    assert events[2].words[0] == Word("so", 0.5, 0.7) and events[2].at == 0.0


def test_whisper_segments_in_a_json_document(tmp_path):
    doc = {"segments": [
        {"start": 0.0, "end": 2.0, "text": " Hello there.", "words": [
            {"word": " Hello", "start": 0.0, "end": 0.5, "probability": 0.9},
            {"word": " there.", "start": 0.6, "end": 1.0, "probability": 0.9}]},
        {"start": 2.0, "end": 4.0, "text": " no words here", "words": []},
    ]}
    f = tmp_path / "whisper.json"
    f.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    events = read_events(str(f), speed=1.0)
    assert [[w.w for w in e.words] for e in events] == [["Hello", "there."], ["no", "words", "here"]]
    assert events[1].words[0] == Word("no", 2.0, 4.0)
    assert [e.at for e in events] == [0.0, 3.0]


def test_plain_text_is_paced_and_bad_input_is_refused(tmp_path):
    f = tmp_path / "talk.txt"
    f.write_text("one two three four five", encoding="utf-8")
    events = read_events(str(f), wps=5, max_chunk=2)
    assert [w.w for e in events for w in e.words] == "one two three four five".split()
    assert not any(e.interim for e in events) and events[-1].at == pytest.approx(1.0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"w": "ok", "end": 1}\n{"w": "x", "end": "soon"}\n', encoding="utf-8")
    with pytest.raises(InputError, match="bad.jsonl:2"):
        read_events(str(bad))
    binary = tmp_path / "audio.wav"
    binary.write_bytes(b"RIFF\x00\x00\x00\x00WAVEfmt ")
    with pytest.raises(InputError, match="binary"):
        read_events(str(binary))


def test_a_bad_line_is_named_by_file_line_and_reason_and_skip_goes_on(tmp_path):
    from streampunct.caption_input import BadLine

    source = tmp_path / "vosk.jsonl"
    source.write_text("\n".join([
        '{"result": [{"word": "so", "start": 0.1, "end": 0.2}]}',
        '{"result": [{"word": "how", "start": 0.3, "end"',
        '{"result": "are you"}',
        '{"result": [{"word": "are", "start": 0.5, "end": 0.6}]}',
    ]) + "\n", encoding="utf-8")
    with pytest.raises(BadLine) as info:
        read_events(str(source), speed=0)
    assert str(info.value).startswith(f"{source}:2: not JSON (")
    reported: list[str] = []
    events = read_events(str(source), speed=0, on_bad_line="skip", report=reported.append)
    assert [w.w for e in events for w in e.words] == ["so", "are"]
    assert [line.split(": ", 1)[0] for line in reported] == [f"{source}:2", f"{source}:3"]
    assert reported[1] == f"{source}:3: 'result' must be a list of words; line skipped"
    with pytest.raises(InputError, match="unknown --on-bad-line action 'ignore'"):
        read_events(str(source), on_bad_line="ignore")


async def test_stdin_stops_at_a_bad_line_after_yielding_what_came_before(monkeypatch):
    import io
    import sys

    from streampunct.caption_input import BadLine, stdin_events

    lines = '{"result": [{"word": "one"}]}\n{"partial": "two"}\nnot json at all\n{"result": [{"word": "three"}]}\n'
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    got = []
    with pytest.raises(BadLine, match=r"^stdin:3: not JSON \(Expecting value at column 1\)$"):
        async for event in stdin_events("vosk"):
            got.append(([w.w for w in event.words], event.interim))
    assert got == [(["one"], False), (["two"], True)]
    monkeypatch.setattr(sys, "stdin", io.StringIO(lines))
    reported: list[str] = []
    got = [[w.w for w in e.words] async for e in stdin_events("vosk", on_bad_line="skip", report=reported.append)]
    assert got == [["one"], ["two"], ["three"]]
    assert reported == ["stdin:3: not JSON (Expecting value at column 1); line skipped"]
