"""Input adapters of ``streampunct caption``: text, JSON lines of words, Vosk, Whisper (JSON and printed)."""

from __future__ import annotations

import json

import pytest

from streampunct.client.caption_input import AsrEvent, detect_format, read_events
from streampunct.core.wire import Word
from streampunct.errors import InputError


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


def test_a_word_item_holding_spaces_is_its_words_sharing_its_time(tmp_path):
    """The server reads one item as one word, spaces removed ("newyork"): the client sends the
    words it holds."""
    f = write_lines(tmp_path / "w.jsonl", [{"w": "new york", "start": 1.0, "end": 2.0}, ["hello there", "ok"]])
    events = read_events(str(f), speed=0)
    assert [w for e in events for w in e.words] == [
        Word("new", 1.0, pytest.approx(1.0 + 3 / 7)), Word("york", pytest.approx(1.0 + 3 / 7), 2.0),
        Word("hello"), Word("there"), Word("ok")]


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
    # no word timestamps: the segment's 2 s shared by characters (2, 5 and 4 of 11)
    assert events[1].words == (Word("no", 2.0, pytest.approx(2 + 2 * 2 / 11)),
                               Word("words", pytest.approx(2 + 2 * 2 / 11), pytest.approx(2 + 2 * 7 / 11)),
                               Word("here", pytest.approx(2 + 2 * 7 / 11), 4.0))
    assert [e.at for e in events] == [0.0, 3.0]


OPENAI_WHISPER = {  # openai-whisper's JSON (transcribe(), no word_timestamps): segments without words
    "text": " And so my fellow Americans, ask not what your country can do for you. ...",
    "segments": [
        {"id": 0, "seek": 0, "start": 0.0, "end": 6.5, "tokens": [1, 2], "temperature": 0.0,
         "text": " And so my fellow Americans, ask not what your country can do for you."},
        {"id": 1, "seek": 0, "start": 6.5, "end": 11.0, "tokens": [3], "temperature": 0.0,
         "text": " Ask what you can do for your country."},
        {"id": 2, "seek": 1100, "start": 11.0, "end": 19.5, "tokens": [3], "temperature": 0.0,
         "text": " We choose to go to the Moon in this decade and do the other things, not because they "
                 "are easy, but because they are hard."},
    ],
    "language": "en",
}


def test_segments_without_word_timestamps_share_their_time_and_make_readable_cues(tmp_path):
    from streampunct.client.subtitles import CueBuilder, TimedWord
    from streampunct.labels import COMMA, PERIOD, O

    source = tmp_path / "whisper.json"
    source.write_text(json.dumps(OPENAI_WHISPER, indent=2), encoding="utf-8")
    words = [w for e in read_events(str(source), speed=0) for w in e.words]
    assert len(words) == 47 and (words[0].start, words[-1].end) == (0.0, 19.5)
    assert all(a.end == pytest.approx(b.start) and a.start < a.end for a, b in zip(words, words[1:], strict=False))
    for segment in OPENAI_WHISPER["segments"]:  # each word within its segment
        inside = [w for w in words if segment["start"] - 1e-9 <= w.start and w.end <= segment["end"] + 1e-9]
        assert len(inside) == len(segment["text"].split())
    builder = CueBuilder()
    cues = []
    for w in words:  # the marks as the server would label them
        label = {",": COMMA, ".": PERIOD}.get(w.w[-1], O)
        cues += builder.add(TimedWord(w.w.rstrip(",.").lower(), label, w.start, w.end))
    cues += builder.close()
    assert 19.5 <= cues[-1].end <= 21.0  # the audio ends at 19.5 s
    assert len(cues) <= 6 and sum(len(c.words) == 1 for c in cues) == 0


@pytest.mark.parametrize("words", ['"words": null, ', "", '"words": [], '])
def test_json_lines_of_segments_without_words_are_whisper(tmp_path, words):
    source = tmp_path / "segments.jsonl"
    source.write_text(f'{{"id": 0, "start": 0.0, "end": 1.0, {words}"text": " so today"}}\n'
                      f'{{"id": 1, "start": 1.0, "end": 3.0, {words}"text": " we talk"}}\n', encoding="utf-8")
    events = read_events(str(source), speed=0)
    assert [(w.w, w.start, w.end) for e in events for w in e.words] == [
        ("so", 0.0, pytest.approx(2 / 7)), ("today", pytest.approx(2 / 7), 1.0),
        ("we", 1.0, pytest.approx(1 + 2 * 2 / 6)), ("talk", pytest.approx(1 + 2 * 2 / 6), 3.0)]
    assert detect_format('{"id": 0, "start": 0.0, "end": 1.0, "text": " so"}') == "whisper"
    assert detect_format('[{"start": 0.0, "end": 1.0, "text": " so"}]') == "whisper"
    assert detect_format('{"text": "so"}') == "vosk"  # Vosk's result without words


def test_a_segment_that_ends_before_it_starts_gives_its_words_its_times(tmp_path):
    """Not a span of 0 s (cues of 1 ms, said nowhere): the words keep the times, and caption's
    check of times that go back names the first of them."""
    from streampunct.commands.caption import _report_times_going_back

    source = tmp_path / "segments.jsonl"
    source.write_text('{"start": 4.0, "end": 3.0, "text": " so today"}\n', encoding="utf-8")
    events = read_events(str(source), speed=0)
    assert [(w.w, w.start, w.end) for e in events for w in e.words] == [("so", 4.0, 3.0), ("today", 4.0, 3.0)]
    reported: list[str] = []
    _report_times_going_back(events, reported.append)
    assert reported == ["warning: word 0 ('so') ends at 3 s, before it starts (4 s): the recognizer's times go "
                        "back, and cues there may be shown for as little as 1 ms"]


@pytest.mark.parametrize(("segment", "reason"), [
    ('{"start": 0, "end": 1, "text": null}', "a segment's 'text' must be a string"),
    ('{"start": 0, "end": 1, "text": 5, "words": null}', "a segment's 'text' must be a string"),
    ('{"start": 0, "end": 1, "text": "so", "words": "so"}', "a segment's 'words' must be a list"),
])
def test_a_segment_whose_text_is_not_a_string_is_a_bad_line(tmp_path, segment, reason):
    from streampunct.client.caption_input import BadLine

    source = tmp_path / "segments.jsonl"
    source.write_text('{"start": 0, "end": 1, "text": " so"}\n' + segment + "\n", encoding="utf-8")
    with pytest.raises(BadLine, match=rf"^{source}:2: {reason}$"):
        read_events(str(source), input_format="whisper", speed=0)
    reported: list[str] = []
    events = read_events(str(source), input_format="whisper", speed=0, on_bad_line="skip", report=reported.append)
    assert [w.w for e in events for w in e.words] == ["so"] and len(reported) == 1


@pytest.mark.parametrize("bad", [{"start": float("nan"), "end": 1.0, "text": "bad one"}, 5])
def test_a_bad_segment_of_a_whisper_document_is_skipped_alone(tmp_path, bad):
    """--on-bad-line skip passes over one bad segment of a document, named by its place; the
    other segments are streamed. stop raises it, as for a bad line."""
    from streampunct.client.caption_input import BadLine

    segments = [{"start": 2.0 * i, "end": 2.0 * i + 2, "text": f" segment {i} here"} for i in range(4)]
    segments[2] = bad
    source = tmp_path / "whisper.json"
    source.write_text(json.dumps({"segments": segments}), encoding="utf-8")
    with pytest.raises(BadLine, match=rf"^{source}:1: segment 3: "):
        read_events(str(source), input_format="whisper", speed=0)
    reported: list[str] = []
    events = read_events(str(source), input_format="whisper", speed=0, on_bad_line="skip", report=reported.append)
    assert [w.w for e in events for w in e.words] == "segment 0 here segment 1 here segment 3 here".split()
    assert len(reported) == 1 and reported[0].startswith(f"{source}:1: segment 3: ")
    assert reported[0].endswith("; segment skipped")


def test_vosk_alternatives_commit_the_best_and_an_unknown_object_is_a_bad_line(tmp_path):
    from streampunct.client.caption_input import BadLine

    source = tmp_path / "vosk.json"
    source.write_text("\n".join(json.dumps(o, indent=2) for o in [
        {"partial": "hello"},
        {"alternatives": [{"confidence": 228.0, "result": [{"end": 0.6, "start": 0.1, "word": "hello"},
                                                            {"end": 1.0, "start": 0.6, "word": "world"}],
                           "text": "hello world"},
                          {"confidence": 200.0, "result": [{"end": 1.0, "start": 0.1, "word": "yellow"}],
                           "text": "yellow"}]},
        {"alternatives": [{"confidence": 150.0, "text": "how are you"}, {"confidence": 100.0, "text": "who"}]},
        {"alternatives": [{"confidence": 0.0, "text": ""}]},
    ]) + "\n", encoding="utf-8")
    events = read_events(str(source), speed=0)  # detected as vosk
    assert [(e.interim, [(w.w, w.start) for w in e.words]) for e in events] == [
        (True, [("hello", None)]), (False, [("hello", 0.1), ("world", 0.6)]),
        (False, [("how", None), ("are", None), ("you", None)])]
    bad = tmp_path / "other.jsonl"
    bad.write_text('{"result": [{"word": "so", "start": 0.1, "end": 0.2}]}\n{"foo": 1}\n'
                   '{"text": null}\n{"alternatives": "so"}\n', encoding="utf-8")
    with pytest.raises(BadLine, match=rf"^{bad}:2: a Vosk result needs 'result', 'text', 'partial' or "
                                      r"'alternatives'$"):
        read_events(str(bad), speed=0)
    reported: list[str] = []
    read_events(str(bad), speed=0, on_bad_line="skip", report=reported.append)
    assert reported == [f"{bad}:2: a Vosk result needs 'result', 'text', 'partial' or 'alternatives'; line skipped",
                        f"{bad}:3: 'text' must be a string; line skipped",
                        f"{bad}:4: 'alternatives' must be a list of objects; line skipped"]


async def test_text_that_starts_with_a_json_list_of_numbers_is_text(tmp_path, monkeypatch):
    import io
    import sys

    from streampunct.client.caption_input import stdin_events

    source = tmp_path / "talk.txt"
    source.write_text("[1] so today we talk\nabout [2] things\n", encoding="utf-8")
    expected = ["[1]", "so", "today", "we", "talk", "about", "[2]", "things"]
    assert [w.w for e in read_events(str(source)) for w in e.words] == expected
    assert detect_format("[1] so today") == detect_format("[[1, 2]] so") == detect_format("[null]") == "text"
    monkeypatch.setattr(sys, "stdin", io.StringIO(source.read_text()))
    assert [w.w for e in [e async for e in stdin_events()] for w in e.words] == expected
    # JSON word lists are still words
    assert detect_format('["so", "today"]') == detect_format('[{"w": "so"}]') == "words"
    words = write_lines(tmp_path / "words.jsonl", [["so", "today"], [{"w": "we", "start": 1.0}]])
    assert [w.w for e in read_events(str(words), speed=0) for w in e.words] == ["so", "today", "we"]


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
    from streampunct.client.caption_input import BadLine

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

    from streampunct.client.caption_input import BadLine, stdin_events

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


# What Vosk's KaldiRecognizer.PartialResult() / Result() / FinalResult() print: pretty JSON over several lines.
VOSK_PRETTY = """{
  "partial" : "so how"
}
{
  "result" : [{
      "conf" : 1.000000,
      "end" : 0.700000,
      "start" : 0.500000,
      "word" : "so"
    }, {
      "conf" : 0.900000,
      "end" : 1.000000,
      "start" : 0.800000,
      "word" : "how"
    }],
  "text" : "so how"
}

{
  "partial" : "are"
}
{
  "text" : ""
}
"""
VOSK_OBJECTS = [
    {"partial": "so how"},
    {"result": [{"conf": 1.0, "end": 0.7, "start": 0.5, "word": "so"},
                {"conf": 0.9, "end": 1.0, "start": 0.8, "word": "how"}], "text": "so how"},
    {"partial": "are"},
    {"text": ""},
]


def test_pretty_printed_vosk_reads_as_its_one_line_form_and_is_detected(tmp_path):
    pretty = tmp_path / "vosk.json"
    pretty.write_text(VOSK_PRETTY, encoding="utf-8")
    one_line = write_lines(tmp_path / "vosk.jsonl", VOSK_OBJECTS)
    expected = read_events(str(one_line), input_format="vosk", speed=2.0)
    assert [(e.interim, [w.w for w in e.words]) for e in expected] == [
        (True, ["so", "how"]), (False, ["so", "how"]), (True, ["are"])]
    assert read_events(str(pretty), input_format="vosk", speed=2.0) == expected
    assert read_events(str(pretty), speed=2.0) == expected  # auto: detected as vosk, not captioned as text
    assert detect_format(VOSK_PRETTY) == "vosk"
    assert detect_format(json.dumps({"w": "hi", "start": 0.1}, indent=2)) == "words"


def test_words_and_whisper_share_the_pretty_json_reader(tmp_path):
    words = tmp_path / "words.json"
    words.write_text("\n".join(json.dumps(o, indent=2) for o in [
        {"w": "so", "start": 1.0, "end": 1.2}, [{"w": "how", "end": 1.5}, {"w": "are", "end": 2.0}],
    ]) + "\n", encoding="utf-8")
    events = read_events(str(words), speed=1.0)
    assert [([w.w for w in e.words], e.at) for e in events] == [(["so"], 0.0), (["how", "are"], pytest.approx(0.8))]
    segments = tmp_path / "segments.json"
    segments.write_text("".join(json.dumps(o, indent=4) for o in [
        {"start": 0.0, "end": 1.0, "text": " Hi.", "words": [{"word": " Hi.", "start": 0.0, "end": 0.4}]},
        {"start": 1.0, "end": 2.0, "text": " Bye.", "words": [{"word": " Bye.", "start": 1.2, "end": 1.6}]},
    ]), encoding="utf-8")  # concatenated with no newline between them
    assert [[w.w for w in e.words] for e in read_events(str(segments), speed=0)] == [["Hi."], ["Bye."]]


def test_text_starting_with_a_brace_that_is_not_json_is_refused_with_a_reason(tmp_path):
    source = tmp_path / "talk.txt"
    source.write_text("{laughs} so how are you\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_events(str(source))
    assert str(info.value) == (f"{source}:1: starts with '{{' but is not JSON (Expecting property name enclosed "
                               "in double quotes at column 2); for plain text pass --input-format text")
    assert [w.w for e in read_events(str(source), input_format="text") for w in e.words][:2] == ["{laughs}", "so"]
    with pytest.raises(InputError, match="starts with '{' but is not JSON"):
        detect_format("{\n  so how\n")
    bracket = tmp_path / "music.txt"
    bracket.write_text("[Music] so how\nare you\n", encoding="utf-8")  # a bracket that is not JSON: text
    assert [w.w for e in read_events(str(bracket)) for w in e.words] == ["[Music]", "so", "how", "are", "you"]


def test_a_bad_pretty_object_in_the_middle_is_named_by_the_line_it_starts_on(tmp_path):
    from streampunct.client.caption_input import BadLine

    lines = VOSK_PRETTY.splitlines(keepends=True)
    bad = lines[:3] + ['{\n', '  "result" : [{\n', '      "end" : soon,\n', '      "word" : "x"\n', '    }],\n',
                       '  "text" : "x"\n', '}\n'] + lines[3:] + ['{\n', '  "result" : "are"\n', '}\n']
    source = tmp_path / "vosk.json"
    source.write_text("".join(bad), encoding="utf-8")
    with pytest.raises(BadLine) as info:
        read_events(str(source), speed=0)
    assert str(info.value) == f"{source}:4: not JSON (Expecting value at line 6 column 15)"
    reported: list[str] = []
    events = read_events(str(source), speed=0, on_bad_line="skip", report=reported.append)
    assert [(e.interim, [w.w for w in e.words]) for e in events] == [
        (True, ["so", "how"]), (False, ["so", "how"]), (True, ["are"])]
    assert reported == [f"{source}:4: not JSON (Expecting value at line 6 column 15); lines 4-10 skipped",
                        f"{source}:32: 'result' must be a list of words; lines 32-34 skipped"]


def test_a_cut_off_line_is_named_by_its_own_line_and_the_next_value_is_read():
    from streampunct.client.caption_input import json_values

    values = list(json_values(['{"partial": "so"}\n', '{"partial": "how\n', '{"partial": "are"\n',
                               '{"partial": "you"}\n', '{\n', '  "partial": "cut"\n', '\n', '{\n',
                               '  "partial": "end"\n']))
    assert [(v.line, v.obj, v.error, v.skipped()) for v in values] == [
        (1, {"partial": "so"}, None, "line skipped"),
        (2, None, "Invalid control character at column 17", "line skipped"),
        (3, None, "Expecting ',' delimiter at column 18", "line skipped"),
        (4, {"partial": "you"}, None, "line skipped"),
        (5, None, "Expecting ',' delimiter at line 6 column 19", "lines 5-7 skipped"),
        (8, None, "Expecting ',' delimiter: the input ends before the value does", "lines 8-9 skipped"),
    ]


def test_json_stream_gives_each_value_as_soon_as_its_text_is_complete():
    from streampunct.client.caption_input import JsonStream

    stream = JsonStream()
    chunks = VOSK_PRETTY.splitlines(keepends=True)
    got = [(n, value.line, value.obj) for n, chunk in enumerate(chunks, 1) for value in stream.feed(chunk)]
    assert got == [(3, 1, VOSK_OBJECTS[0]), (17, 4, VOSK_OBJECTS[1]), (21, 19, VOSK_OBJECTS[2]),
                   (24, 22, VOSK_OBJECTS[3])]
    assert stream.close() == []
    stream = JsonStream()  # chunks cut anywhere, as a pipe may deliver them
    assert stream.feed('{"partial": "so h') == [] and stream.feed('ow"}{"text": tr') == [
        stream_value(1, {"partial": "so how"})]
    assert stream.feed('ue}\n[1, 2') == [stream_value(1, {"text": True})]
    assert stream.feed("]") == [stream_value(2, [1, 2])]
    assert stream.feed("\n12") == [] and stream.close() == [stream_value(3, 12)]


def stream_value(line, obj):
    from streampunct.client.caption_input import JsonValue

    return JsonValue(line, obj, first=json.dumps(obj)[0], last=line)


async def test_stdin_sends_a_pretty_vosk_result_before_the_next_one_is_written(monkeypatch):
    import asyncio
    import os
    import sys

    from streampunct.client.caption_input import stdin_events

    read, write = os.pipe()
    pipe = os.fdopen(read, encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", pipe)
    events = stdin_events()  # auto: detected from the first object
    try:
        os.write(write, VOSK_PRETTY.split("{\n  \"result\"")[0].encode())  # the partial only
        first = await asyncio.wait_for(anext(events), timeout=10)
        assert first == AsrEvent(None, (Word("so"), Word("how")), interim=True)
        os.write(write, VOSK_PRETTY[VOSK_PRETTY.index('{\n  "result"'):].encode())
    finally:
        os.close(write)
    rest = [(e.interim, [w.w for w in e.words]) async for e in events]
    pipe.close()
    assert rest == [(False, ["so", "how"]), (True, ["are"])]


async def test_stdin_refuses_braced_text_and_reads_bracketed_text(monkeypatch):
    import io
    import sys

    from streampunct.client.caption_input import stdin_events

    monkeypatch.setattr(sys, "stdin", io.StringIO("\n{laughs} so\nhow\n"))
    with pytest.raises(InputError, match=r"^stdin:2: starts with '\{' but is not JSON \(Expecting property name"):
        [e async for e in stdin_events()]
    monkeypatch.setattr(sys, "stdin", io.StringIO("[Music]\nso how\n"))
    assert [[w.w for w in e.words] async for e in stdin_events()] == [["[Music]"], ["so", "how"]]


async def test_stdin_word_label_lines_send_their_words_as_a_file_does(monkeypatch, tmp_path):
    """``cat talk.tsv | caption -``: the labels are not words (docs: "labels ignored")."""
    import io
    import sys

    from streampunct.client.caption_input import labeled_word, read_transcript, stdin_events

    tsv = "Hello\tCOMMA\nworld\tPERIOD\n,\tCOMMA\n\nhow\tO\nare\tO\nyou\tQUESTION\n"
    source = tmp_path / "talk.tsv"
    source.write_text(tsv, encoding="utf-8")
    for input_format in ("auto", "text"):
        monkeypatch.setattr(sys, "stdin", io.StringIO(tsv))
        got = [[w.w for w in e.words] async for e in stdin_events(input_format, max_chunk=4)]
        assert got == [["hello"], ["world"], ["how"], ["are"], ["you"]]
        assert [w for words in got for w in words] == read_transcript(source)
    # a line of plain text is still all words, even with a tab in it
    monkeypatch.setattr(sys, "stdin", io.StringIO("so\tPERIOD\nhow are\tyou\nit is O\n"))
    assert [[w.w for w in e.words] async for e in stdin_events()] == [["so"], ["how", "are", "you"],
                                                                     ["it", "is", "O"]]
    assert labeled_word("O") is None and labeled_word("well\tBOGUS") is None and labeled_word("-\tCOMMA") == ""


@pytest.mark.parametrize("time", ["NaN", "Infinity", "-Infinity", "1e308", "-1e308", "1" + "0" * 400])
def test_a_word_time_that_is_not_finite_or_too_large_is_a_bad_line(tmp_path, time):
    """Python's json reads NaN and Infinity, which the server refuses (the word was lost), and
    1e308 s has no subtitle timestamp (an OverflowError in --format srt)."""
    from streampunct.client.caption_input import MAX_TIME_S, BadLine

    source = tmp_path / "words.jsonl"
    source.write_text('{"w": "so", "start": 0.1, "end": 0.2}\n'
                      f'{{"w": "hello", "start": {time}, "end": 0.4}}\n'
                      '{"w": "there", "start": 0.5, "end": 0.6}\n', encoding="utf-8")
    with pytest.raises(BadLine, match=rf"^{source}:2: 'start' must be a finite number of seconds"):
        read_events(str(source), speed=0)
    reported: list[str] = []
    events = read_events(str(source), speed=0, on_bad_line="skip", report=reported.append)
    assert [w.w for e in events for w in e.words] == ["so", "there"]
    assert len(reported) == 1 and reported[0].startswith(f"{source}:2: ") and reported[0].endswith("; line skipped")
    assert MAX_TIME_S == 2**53 / 1000
    edge = tmp_path / "edge.jsonl"
    edge.write_text(f'{{"w": "late", "start": {MAX_TIME_S!r}}}\n', encoding="utf-8")  # the bound itself is kept
    assert read_events(str(edge), speed=0)[0].words == (Word("late", MAX_TIME_S),)


async def test_stdin_refuses_a_word_time_that_is_not_finite(monkeypatch):
    import io
    import sys

    from streampunct.client.caption_input import stdin_events

    monkeypatch.setattr(sys, "stdin", io.StringIO(
        '{"result": [{"word": "so", "start": 0.1}]}\n{"result": [{"word": "hi", "end": NaN}]}\n'
        '{"result": [{"word": "there", "start": -Infinity}]}\n'))
    reported: list[str] = []
    got = [[w.w for w in e.words] async for e in stdin_events("vosk", on_bad_line="skip", report=reported.append)]
    assert got == [["so"]]
    assert [line.split(": ", 1)[0] for line in reported] == ["stdin:2", "stdin:3"]
    assert "'end' must be a finite number of seconds" in reported[0] and "got NaN" in reported[0]


def test_a_latin1_transcript_is_read_once_and_warned_about_once(tmp_path, caplog):
    f = tmp_path / "talk.txt"
    f.write_bytes(b"caf\xe9 is here and there\n")
    events = read_events(str(f), wps=100)
    assert [w.w for e in events for w in e.words] == ["caf\u00e9", "is", "here", "and", "there"]
    assert [r.getMessage() for r in caplog.records if "not UTF-8" in r.getMessage()] == [
        f"{f} is not UTF-8 (byte 0xe9 at offset 3): read as Windows-1252 (Latin-1)"]


# whisper.cpp's -oj document as examples/cli/cli.cpp writes it (output_json): tab-indented, a
# "result" object that is not Vosk's, segment times in "offsets" (ms); "[BLANK_AUDIO]" for silence.
WHISPER_CPP_JSON = """{
\t"systeminfo": "AVX = 1 | AVX2 = 1",
\t"model": {
\t\t"type": "base",
\t\t"multilingual": false
\t},
\t"params": {
\t\t"model": "models/ggml-base.en.bin",
\t\t"language": "en",
\t\t"translate": false
\t},
\t"result": {
\t\t"language": "en"
\t},
\t"transcription": [
\t\t{
\t\t\t"timestamps": {
\t\t\t\t"from": "00:00:00,000",
\t\t\t\t"to": "00:00:02,000"
\t\t\t},
\t\t\t"offsets": {
\t\t\t\t"from": 0,
\t\t\t\t"to": 2000
\t\t\t},
\t\t\t"text": " [BLANK_AUDIO]"
\t\t},
\t\t{
\t\t\t"timestamps": {
\t\t\t\t"from": "00:00:02,000",
\t\t\t\t"to": "00:00:04,000"
\t\t\t},
\t\t\t"offsets": {
\t\t\t\t"from": 2000,
\t\t\t\t"to": 4000
\t\t\t},
\t\t\t"text": " So how are you?"
\t\t}
\t]
}
"""


@pytest.mark.parametrize("input_format", ["auto", "whisper"])
def test_a_whisper_cpp_json_document_is_timed_by_its_offsets_without_its_markers(tmp_path, input_format):
    source = tmp_path / "talk.wav.json"
    source.write_text(WHISPER_CPP_JSON, encoding="utf-8")
    assert detect_format(WHISPER_CPP_JSON) == "whisper"
    events = read_events(str(source), input_format=input_format, speed=0)
    ends = [pytest.approx(2 + 2 * n / 12) for n in (2, 5, 8)]  # its 2 s shared by characters (12)
    assert [w for e in events for w in e.words] == [
        Word("So", 2.0, ends[0]), Word("how", ends[0], ends[1]), Word("are", ends[1], ends[2]), Word("you?", ends[2], 4.0)]


# Segment lines as the tools print them on stdout: openai-whisper (whisper/transcribe.py, verbose:
# "[MM:SS.mmm --> MM:SS.mmm] " + the segment's text, which starts with a space; hours once there
# are any), whisper.cpp's whisper-cli (a blank line first, then "[HH:MM:SS.mmm --> HH:MM:SS.mmm]  "
# + text), faster-whisper's README example ("[%.2fs -> %.2fs] %s").
PRINTED_SEGMENTS = {
    "openai-whisper": "[59:58.000 --> 59:59.500]  So how are you?\r\n[59:59.500 --> 01:00:01.000]  Fine.\r\n",
    "whisper.cpp": "\n[00:59:58.000 --> 00:59:59.500]   So how are you?\n[00:59:59.500 --> 01:00:01.000]   Fine.\n"
                   "[01:00:01.000 --> 01:00:03.000]   [BLANK_AUDIO]\n",
    "faster-whisper": "[3598.00s -> 3599.50s]  So how are you?\n[3599.50s -> 3601.00s]  Fine.\n",
}


@pytest.mark.parametrize("tool", PRINTED_SEGMENTS)
async def test_printed_whisper_segment_lines_are_timed_segments_from_a_file_and_stdin(tmp_path, monkeypatch, tool):
    import io
    import sys

    from streampunct.client.caption_input import stdin_events

    source = tmp_path / "talk.txt"
    source.write_bytes(PRINTED_SEGMENTS[tool].encode())
    for input_format in ("auto", "whisper"):
        events = read_events(str(source), input_format=input_format, speed=1.0)
        assert [(e.at, [(w.w, w.start, w.end) for w in e.words]) for e in events] == [
            (0.0, [("So", 3598.0, 3598.25), ("how", 3598.25, 3598.625), ("are", 3598.625, 3599.0),
                                  ("you?", 3599.0, 3599.5)]),
            (pytest.approx(1.5), [("Fine.", 3599.5, 3601.0)])]
    monkeypatch.setattr(sys, "stdin", io.StringIO(source.read_text(encoding="utf-8")))
    assert [[w.w for w in e.words] async for e in stdin_events()] == [["So", "how", "are", "you?"], ["Fine."]]


def test_openai_whisper_language_lines_are_bad_lines_of_printed_segments(tmp_path):
    source = tmp_path / "talk.txt"
    source.write_text("Detecting language using up to the first 30 seconds. Use `--language` to specify the language\n"
                      "Detected language: English\n[00:00.000 --> 00:01.000]  So how\n", encoding="utf-8")
    reported: list[str] = []
    events = read_events(str(source), input_format="whisper", speed=0, on_bad_line="skip", report=reported.append)
    assert [w.w for e in events for w in e.words] == ["So", "how"]
    assert reported == [f"{source}:1: not JSON (Expecting value at column 1); line skipped",
                        f"{source}:2: not JSON (Expecting value at column 1); line skipped"]


VOSK_BANNER = ("#" * 80 + "\nPress Ctrl+C to stop the recording\n" + "#" * 80 + "\n"
               '{\n  "partial" : "hello"\n}\n{\n  "text" : "hello world"\n}\n')  # vosk-api's test_microphone.py


async def test_json_results_after_a_banner_read_as_text_are_refused_not_sent_as_words(tmp_path, monkeypatch):
    """``python test_microphone.py | caption -``: the banner makes ``auto`` read text, and the
    Vosk results after it would go to the server as words ('"partial"', ':', '"hello"')."""
    import io
    import sys

    from streampunct.client.caption_input import stdin_events

    source = tmp_path / "mic.txt"
    source.write_text(VOSK_BANNER, encoding="utf-8")
    advice = ("opens a JSON value, but the input was taken for plain text from its first line; for an ASR's "
              "JSON output pass --input-format vosk or whisper (with --on-bad-line skip for the lines that "
              "are not JSON), or --input-format text to send it as text")
    with pytest.raises(InputError) as info:
        read_events(str(source))
    assert str(info.value) == f"{source}:4: {advice}"
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n" + VOSK_BANNER))
    seen: list[list[str]] = []
    with pytest.raises(InputError) as info:
        async for event in stdin_events():
            seen.append([w.w for w in event.words])
    assert str(info.value) == f"stdin:5: {advice}"
    assert seen == [["#" * 80], ["Press", "Ctrl+C", "to", "stop", "the", "recording"], ["#" * 80]]
    # what the message says to do reads it; text asked for is sent as text; braces in text are text
    reported: list[str] = []
    events = read_events(str(source), input_format="vosk", on_bad_line="skip", report=reported.append, speed=0)
    assert [(e.interim, [w.w for w in e.words]) for e in events] == [(True, ["hello"]), (False, ["hello", "world"])]
    assert len(reported) == 3
    assert '"partial"' in [w.w for e in read_events(str(source), input_format="text") for w in e.words]
    source.write_text("so today\n{laughs} and { the braces }\n", encoding="utf-8")
    assert [w.w for e in read_events(str(source)) for w in e.words][2:4] == ["{laughs}", "and"]


async def test_printed_segments_after_a_language_line_are_refused_not_sent_as_words(tmp_path, monkeypatch):
    """faster-whisper's example and openai-whisper without --language print "Detected language"
    first: ``auto`` reads text, and the segments' timestamps would be sent as words."""
    import io
    import sys

    from streampunct.client.caption_input import stdin_events

    printed = "Detected language 'en' with probability 0.98\n[0.00s -> 2.00s] So today\n[2.00s -> 3.50s] we talk\n"
    source = tmp_path / "fw.txt"
    source.write_text(printed, encoding="utf-8")
    advice = ("is a Whisper segment as the tools print it, but the input was taken for plain text from its first "
              "line; pass --input-format whisper (with --on-bad-line skip for lines such as \"Detected "
              "language\"), or --input-format text to send it as text")
    with pytest.raises(InputError) as info:
        read_events(str(source))
    assert str(info.value) == f"{source}:2: {advice}"
    monkeypatch.setattr(sys, "stdin", io.StringIO(printed))
    with pytest.raises(InputError) as info:
        [e async for e in stdin_events()]
    assert str(info.value) == f"stdin:2: {advice}"
    events = read_events(str(source), input_format="whisper", on_bad_line="skip", report=lambda _: None, speed=0)
    assert [[w.w for w in e.words] for e in events] == [["So", "today"], ["we", "talk"]]
    # a file's lines are numbered as stdin's: only at newlines
    source.write_text("so today\x0c we talk\nand\n{\"text\": \"x\"}\n", encoding="utf-8")
    with pytest.raises(InputError, match=rf"^{source}:3: opens a JSON value"):
        read_events(str(source))


def test_a_printed_segment_time_past_a_float_is_a_bad_line(tmp_path):
    from streampunct.client.caption_input import BadLine

    source = tmp_path / "big.txt"
    source.write_text(f"[{'9' * 400}:00.000 --> 00:01.000] hi\n[00:01.000 --> 00:02.000] there\n", encoding="utf-8")
    with pytest.raises(BadLine, match=rf"^{source}:1: "):
        read_events(str(source))
    assert [[w.w for w in e.words] for e in read_events(str(source), on_bad_line="skip", report=lambda _: None,
                                                        speed=0)] == [["there"]]
