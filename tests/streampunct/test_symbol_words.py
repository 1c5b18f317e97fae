"""Words made only of symbols (emoji, ``™``, ``€``, ``+``) offline: kept as they are, in their place,
with no mark, and unseen by the model (docs/protocol.md, "Notes on this implementation"); the
stream drops them as before."""

from __future__ import annotations

import pytest

from streampunct.cli import main
from streampunct.labels import COMMA, PERIOD, QUESTION, O
from streampunct.model import DEFAULT_MODEL_DIR
from streampunct.text.normalize import (
    is_symbol_word,
    normalize_word,
    offline_tokens,
    render,
    render_with_symbols,
    symbol_word,
)

ZWJ = "\u200d"


SYMBOL_CASES = [
    ("🍕", "🍕"),
    ("🍕🍔", "🍕🍔"),
    ("🍕,", "🍕"),  # punctuation at the edges goes, as from every word
    ("(🍕)!", "🍕"),
    (f"👩{ZWJ}💻", f"👩{ZWJ}💻"),  # the joiner between two symbols makes one emoji
    ("❤\ufe0f", "❤\ufe0f"),  # with its variation selector
    ("👍🏽", "👍🏽"),  # and its skin tone
    ("🇫🇷", "🇫🇷"),
    ("#\ufe0f\u20e3", "#\ufe0f\u20e3"),  # a keycap: '#' is punctuation, but not here
    ("™", "™"),  # as it is: no NFKC ("TM")
    ("€", "€"), ("+", "+"), ("→", "→"), ("°", "°"),
    ("\u202e🍕\u200b", "🍕"),  # bidi controls and zero-width characters stay dropped
    (f"{ZWJ}🍕{ZWJ}", "🍕"),  # a joiner with no symbol on both sides too
    ("🏴\U000e0067\U000e0062\U000e007f", "🏴"),  # and tag characters
    ("🍕" * 150, "🍕" * 100),  # cut to 100 characters
    (f"👩{ZWJ}💻" * 40, f"👩{ZWJ}💻" * 33),  # at a symbol's end (3 characters each)
    # punctuation that stands for a word is kept as a symbol is ("rock & roll", "fifty % of")
    ("&", "&"), ("%", "%"), ("%,", "%"), ("@", "@"), ("#", "#"), ("/", "/"), ("§", "§"), ("％", "％"),
    # not symbol words: a letter, a digit, inner punctuation, nothing but marks or quotes
    ("pizza🍕", ""), ("$5", ""), ("🍕-🍔", ""), ("...", ""), ("?!", ""), ('"', ""), ("¿", ""), ("…", ""),
    ("", ""), ("\u200b", ""),
    ("\ufffd", ""), ("\ufffd🍕", "🍕"),  # U+FFFD stands for undecodable bytes: no symbol
    ("1\ufe0f\u20e3", "1\ufe0f\u20e3"), ("☺\ufe0f", "☺\ufe0f"), ("⚠\ufe0f", "⚠\ufe0f"),
    ("№", "№"), ("℃", "℃"), ("㎞", "㎞"), ("Ⓐ", "Ⓐ"), ("℠", "℠"),
]


@pytest.mark.parametrize("word, shown", SYMBOL_CASES)
def test_symbol_word(word, shown):
    assert symbol_word(word) == shown
    assert is_symbol_word(shown) == bool(shown)


@pytest.mark.parametrize("word, shown", [c for c in SYMBOL_CASES if c[1]])
def test_the_stream_drops_every_word_the_offline_rule_keeps_as_a_symbol(word, shown):
    """The two rules agree: a word kept offline as a symbol word is empty in the stream, with
    the marks that belong to its symbols (an emoji's U+FE0F, a keycap's U+20E3) and before
    NFKC could fold a symbol into letters ("™" -> "tm", "№" -> "no")."""
    assert normalize_word(word) == ""


@pytest.mark.parametrize("word, normalized", [
    ("love❤\ufe0f", "love"), ("(yes)👍\ufe0f!", "yes"), ("brand™", "brand"), ("№5", "5"),
    ("ﬁne", "fine"), ("ｈｅｌｌｏ", "hello"), ("x²", "x2"), ("\u2019s", "'s"), ("'cause", "'cause"),
    ("क्\u200dष", "क्\u200dष"), ("می\u200cخواهم", "می\u200cخواهم"), ("ᾠδή", "ᾠδή"), ("straße", "straße"),
])
def test_the_stream_keeps_letters_their_marks_and_inner_symbols(word, normalized):
    assert normalize_word(word) == normalized
    assert normalize_word(normalized) == normalized


def test_offline_tokens_keep_symbol_words_and_normalize_the_others():
    assert offline_tokens(["Pizza,", "🍕", "OK!", "...", "\u200e™", "don't"])[0] == ["pizza", "🍕", "ok", "™", "don't"]
    assert offline_tokens(["rock", "&", "roll", "fifty", "%", "of", "--"])[0] == ["rock", "&", "roll", "fifty", "%", "of"]
    # no word the model reads is taken for a symbol word
    assert not any(is_symbol_word(normalize_word(w)) for w in ["a+b", "x", "r&d", "l'été", "5%"])
    # the stream's normalization is unchanged: symbol words become empty
    assert [normalize_word(w) for w in ["🍕", "€", f"👩{ZWJ}💻", "&", "%"]] == ["", "", "", "", ""]


def test_the_words_around_a_symbol_are_rendered_as_if_it_were_absent():
    def plain(words, labels, cases, start, affixes):
        return render(words, labels, capitalize=True, sentence_start=start, cases=cases, affixes=affixes)

    tokens = ["pizza", "🍕", "ok", "so", "🎉", "🎉", "what", "now"]
    labels = [PERIOD, COMMA, O, O, QUESTION]
    assert render_with_symbols(tokens, labels, plain) == "Pizza. 🍕 Ok, so 🎉 🎉 what now?"
    assert render_with_symbols(["🍕"], [], plain) == "🍕"
    assert render_with_symbols(["do", "🍕", "n't"], [O, PERIOD], plain) == "Do 🍕 n't."  # no clitic joined across
    with pytest.raises(ValueError):
        render_with_symbols(["pizza", "🍕"], [O, O], plain)
    # a unit after a word takes its mark after it ("50. %" read wrong), an emoji does not
    assert render_with_symbols(["rate", "50", "%"], [O, PERIOD], plain) == "Rate 50 %."
    assert render_with_symbols(["it", "is", "5", "€", "%", "ok"], [O, O, PERIOD, PERIOD], plain) == "It is 5 € %. Ok."
    assert render_with_symbols(["5", "€", "🍕", "so"], [COMMA, QUESTION], plain) == "5 €, 🍕 so?"
    assert render_with_symbols(["20", "°", "out"], [COMMA, PERIOD], plain) == "20 °, out."
    assert render_with_symbols(["great", "👍"], [PERIOD], plain) == "Great. 👍"
    # a currency sign before a number is that number's, not a unit of the word before it
    assert render_with_symbols(["great", "$", "20", "it", "is"], [PERIOD, O, O, PERIOD], plain) == "Great. $ 20 it is."
    assert render_with_symbols(["well", "$", "5", "ok"], [COMMA, O, PERIOD], plain) == "Well, $ 5 ok."


class Recorder:
    """The offline decoder's face for punctuate_lines: records what the model is given."""

    has_case = False

    def __init__(self):
        self.calls = []

    def punctuate(self, words):
        self.calls.append(list(words))
        return [O] * (len(words) - 1) + [PERIOD]


def test_punctuate_lines_keep_symbol_words_in_place_and_hide_them_from_the_model():
    from streampunct.commands.punctuate import punctuate_lines

    model = Recorder()
    segments = [["pizza", "🍕", "ok"], ["🍕"], ["so", "good", "👍🏽"], ["yes"]]
    assert punctuate_lines(segments, model, capitalize=True) == ["Pizza 🍕 ok.", "🍕", "So good. 👍🏽", "Yes."]
    assert model.calls == [["pizza", "ok"], ["so", "good"], ["yes"]]  # a line of symbols costs no model call


def test_punctuate_reads_symbol_words_from_the_file(tmp_path):
    from streampunct.commands.punctuate import read_transcript_lines, read_transcript_words

    f = tmp_path / "in.txt"
    f.write_text("Pizza 🍕, ok\n🍕\n", encoding="utf-8")
    assert read_transcript_lines(str(f)) == [["pizza", "🍕", "ok"], ["🍕"]]
    assert read_transcript_words(str(f)) == ["pizza", "ok"]
    f.write_text("🍕 🍔\n", encoding="utf-8")  # symbols only: still something to write
    assert read_transcript_lines(str(f)) == [["🍕", "🍔"]]
    f.write_text("... --\n", encoding="utf-8")
    with pytest.raises(Exception, match="no words in the input"):
        read_transcript_lines(str(f))


@pytest.mark.skipif(not (DEFAULT_MODEL_DIR / "streampunct.json").is_file(), reason="needs the shipped model")
def test_punctuate_command_with_emoji(tmp_path, capsys):
    """``printf 'pizza 🍕 ok\\n🍕\\n' | streampunct punctuate -``: the emoji stay, in place, and the
    words around them get the marks they get without them."""
    with_emoji = tmp_path / "emoji.txt"
    with_emoji.write_text("pizza 🍕 ok\n🍕\nwhat is this 👩\u200d💻 thing i like it ✨\n", encoding="utf-8")
    without = tmp_path / "plain.txt"
    without.write_text("pizza ok\n\nwhat is this thing i like it\n", encoding="utf-8")
    assert main(["punctuate", str(with_emoji), "--capitalize"]) == 0
    got = capsys.readouterr().out.split("\n")
    assert main(["punctuate", str(without), "--capitalize"]) == 0
    plain = capsys.readouterr().out.split("\n")
    assert got[1] == "🍕"
    assert got[0].split()[1] == "🍕" and got[2].split()[3] == "👩\u200d💻" and got[2].endswith(" ✨")
    emoji = {"🍕", "👩\u200d💻", "✨"}
    assert [" ".join(w for w in line.split() if w not in emoji) for line in (got[0], got[2])] == [plain[0], plain[2]]
