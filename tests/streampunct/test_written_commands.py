"""Written forms outside the server core: serve/punctuate/caption flags, the Python API, and the
caption view's sentence cuts over text as sent."""

from __future__ import annotations

import subprocess
import sys

import pytest

from streampunct.api import Punctuator
from streampunct.cli import build_parser
from streampunct.client.caption import _sentences, caption
from streampunct.commands.punctuate import punctuate_lines
from streampunct.errors import InputError
from streampunct.labels import PERIOD, O
from streampunct.text import itn
from streampunct.text.written_form import Lexicon, WrittenForms
from tests.streampunct.conftest import TEST_WINDOW, FakeEngine
from tests.streampunct.written_fakes import FakeNormalizer


@pytest.fixture
def lexicon_tsv(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("# spoken\twritten\nnasa\tNASA\nnew york\tNew York\n", encoding="utf-8")
    return path


def test_serve_flags(lexicon_tsv):
    from streampunct.commands.serve import build_config

    config = build_config(build_parser().parse_args(["serve", "--lexicon", str(lexicon_tsv)]))
    assert config.lexicon == (("nasa", "NASA"), ("new york", "New York"))
    assert config.itn_grammars == "off" and not config.session_defaults.itn
    assert config.itn_workers == 1
    assert build_config(build_parser().parse_args(["serve", "--itn-workers", "0"])).itn_workers == 0
    with pytest.raises(InputError, match="--itn-workers must be an integer >= 0, not -1"):
        build_config(build_parser().parse_args(["serve", "--itn-workers", "-1"]))
    if itn.available():
        config = build_config(build_parser().parse_args(["serve", "--itn", "--itn-cache", "/tmp/x"]))
        assert config.session_defaults.itn and config.itn_grammars == "on" and str(config.itn_cache) == "/tmp/x"


def test_a_bad_lexicon_file_is_a_one_line_usage_error(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_text("nasa\tNASA\nno tab\n", encoding="utf-8")
    for command in (["serve"], ["punctuate", "-"], ["caption", "-"]):
        proc = subprocess.run([sys.executable, "-m", "streampunct.cli", *command, "--lexicon", str(bad)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        assert proc.stderr.strip().splitlines()[-1].endswith(
            f"error: argument --lexicon: {bad}:2: expected 'spoken<TAB>written', got 'no tab'")


class WordPunctuator:
    """The offline decoder's face for punctuate_lines: a period after 'dollars' and 'york'."""

    has_case = False  # as Punctuator.has_case: no truecasing head

    def punctuate(self, words):
        return [PERIOD if w in ("dollars", "york") else O for w in words]


def test_punctuate_lines_write_phrases():
    formatter = WrittenForms(Lexicon([("new york", "New York")]), FakeNormalizer()).formatter(
        itn=True, lexicon=(), capitalize=True)
    lines = punctuate_lines([["it", "costs", "twenty", "five", "dollars"], [], ["in", "new", "york"]],
                            WordPunctuator(), capitalize=True, formatter=formatter)
    assert lines == ["It costs $25.", "", "In New York."]


def test_punctuate_command_with_a_lexicon(lexicon_tsv):
    proc = subprocess.run([sys.executable, "-m", "streampunct.cli", "punctuate", "-", "--lexicon", str(lexicon_tsv)],
                          input="we met nasa in new york today", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "NASA" in proc.stdout and "New York" in proc.stdout


def test_python_api_punctuate_and_stream_take_itn_and_a_lexicon(aligner):
    written = WrittenForms(Lexicon([("nasa", "NASA")]), FakeNormalizer())
    p = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW, written=written, capitalize=False)
    text = p.punctuate("nasa paid twenty five dollars")
    assert text.startswith("NASA paid $25")
    assert "twenty" in p.punctuate("nasa paid twenty five dollars", itn=False)
    s = p.stream(right_context=1, max_delay_ms=60_000, lexicon=[("paid", "PAID")])
    finals = s.push("nasa paid twenty five dollars today".split(), now=0.0) + s.end(now=1.0)
    shown = " ".join(f.text for f in finals if f.text)
    assert shown.replace(",", "").replace(".", "").replace("?", "") == "NASA PAID $25 today"
    plain = Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)
    with pytest.raises(Exception, match=r"itn needs the ITN grammars: Punctuator.load\(\.\.\., itn=True\)"):
        plain.stream(itn=True)


async def test_caption_sends_the_lexicon_and_keeps_the_text_as_sent(start_server):
    server = await start_server(lexicon=(("new york", "New York"),))
    result = await caption(server.url, "we flew from nasa to new york".split(), wps=200, right_context=1,
                           max_delay_ms=60_000, lexicon=[("nasa", "NASA")])
    assert result.options.lexicon == (("nasa", "NASA"),)
    shown = " ".join(t for _, _, t in result.transcript.texts if t)
    assert shown.replace(",", "").replace(".", "").replace("?", "") == "We flew from NASA to New York"
    assert result.transcript.words == "we flew from nasa to new york".split()


@pytest.mark.parametrize(("text", "ends", "pieces"), [
    ("It costs $25. At 7 p.m. we", 1, [("It costs $25.", True), ("At 7 p.m. we", False)]),
    ("It ends at 7 p.m.", 1, [("It ends at 7 p.m.", True)]),
    ("Why? Fine. so", 2, [("Why?", True), ("Fine.", True), ("so", False)]),
    ("", 0, []),
])
def test_sentences_cut_by_the_finals_marks(text, ends, pieces):
    assert _sentences(text, ends) == pieces
