"""``streampunct punctuate``: punctuate a text file (or stdin) offline."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from streampunct.errors import InputError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from streampunct.core.decoder import OfflineDecoder
    from streampunct.text.normalize import Affix

NAME = "punctuate"
HELP = ("punctuate a transcript (plain text, each line a segment; or a word<TAB>LABEL file) with the offline "
        "decoder; words are normalized as the server's are (lowercase, punctuation and symbols at a word's "
        "edges dropped; a word of symbols alone is kept; a word cut to 100 characters, with a warning)")
LOG_LEVEL = "WARNING"  # a filter: stderr carries only what went wrong


def add_arguments(p: argparse.ArgumentParser) -> None:
    from engines.registry import BACKENDS
    from streampunct.commands.argtypes import (
        add_engine_option,
        lexicon_file,
        path_argument,
        path_text,
    )
    from streampunct.model import model_folder_argument

    p.add_argument("input", nargs="?", default="-", type=path_text, help="text file, or - for stdin (default)")
    p.add_argument("--model", type=model_folder_argument, default=None, help="model folder (default: the shipped model)")
    p.add_argument("--engine", default="onnxruntime", choices=list(BACKENDS),
                   help="engine backend (default: onnxruntime)")
    add_engine_option(p)
    p.add_argument("--capitalize", action="store_true",
                   help="capitalize sentence starts and 'I'; a model with a truecasing head also writes "
                        "the case it learned (names, acronyms)")
    p.add_argument("--itn", action="store_true",
                   help="write numbers, dates, times and money as digits and symbols (inverse text "
                        "normalization, as a session's config.itn; needs the itn extra)")
    p.add_argument("--itn-cache", type=path_argument, default=None, metavar="DIR",
                   help="where the compiled ITN grammars are cached (default: ~/.cache/streampunct/itn)")
    p.add_argument("--lexicon", metavar="FILE", type=lexicon_file, default=(),
                   help="spoken phrases and how to write them, one 'spoken<TAB>written' pair a line "
                        "(as serve --lexicon)")
    p.add_argument("--out", type=path_text, default=None, metavar="FILE",
                   help="write here instead of stdout ('-': stdout), whole or not at all; the path is "
                        "checked before the model runs")


def read_transcript_lines(source: str) -> list[list[str]]:
    """Normalized words of each line of a plain-text transcript (blank lines give ``[]``).
    :func:`read_transcript_segments` without the symbols around the words."""
    return [tokens for tokens, _ in read_transcript_segments(source)]


def read_transcript_segments(source: str) -> list[tuple[list[str], list[Affix]]]:
    """Normalized words of each line of a plain-text transcript (blank lines give ``[]``), and
    the symbols around each (``$1,000``: :func:`streampunct.text.normalize.offline_tokens`).

    A ``word<TAB>LABEL`` file (every non-blank line one, its labels in any case: ``COMMA`` or
    ``comma``; see :func:`streampunct.text.word_labels.is_word_label_text`) is one segment (one line). Text is decoded by
    its byte-order mark (UTF-8, UTF-16, UTF-32; UTF-8 without one, bad bytes
    replaced); binary input and input without words raise InputError. A word
    made only of symbols (emoji) is kept as it is
    (:func:`streampunct.text.normalize.offline_tokens`): it is written back in
    its place, with no mark, and the model does not see it.
    """
    from streampunct.text.normalize import offline_tokens
    from streampunct.text.textfile import read_text, split_lines
    from streampunct.text.word_labels import is_word_label_text, labeled_pair

    lines = split_lines(read_text(source))
    name = "stdin" if source == "-" else source
    if is_word_label_text(lines, name):
        segments = [offline_tokens(labeled_pair(line, name, n)[0]
                                   for n, line in enumerate(lines, 1) if line.strip())]
    else:
        segments = [offline_tokens(line.split()) for line in lines]
    if not any(tokens for tokens, _ in segments):
        raise InputError("no words in the input (it is empty or holds only punctuation)")
    _warn_cut_words(segments, name)
    return segments


def _warn_cut_words(segments: list[tuple[list[str], list[Affix]]], name: str) -> None:
    """A warning when words were cut to ``MAX_WORD_CHARS`` (as the server cuts them): a token
    without spaces that long (a URL, a line of a script without spaces) loses its rest."""
    import logging

    from streampunct.text.normalize import MAX_WORD_CHARS

    cut = [w for tokens, _ in segments for w in tokens if len(w) >= MAX_WORD_CHARS]
    if cut:
        logging.getLogger(__name__).warning(
            "%s: %d word(s) reached the %d-character limit; a longer word is cut to it (the first: %s...)",
            name, len(cut), MAX_WORD_CHARS, cut[0][:20])


def read_transcript_words(source: str) -> list[str]:
    """Words of a plain-text or ``word<TAB>LABEL`` transcript, normalized, lines joined (symbol words
    left out)."""
    from streampunct.text.normalize import is_symbol_word

    return [w for line in read_transcript_lines(source) for w in line if not is_symbol_word(w)]


def punctuate_lines(segments: list[list[str]], punctuator: OfflineDecoder, *, capitalize: bool = False,
                    formatter=None, affixes: Sequence[Sequence[Affix]] | None = None) -> list[str]:
    """Each line punctuated as its own segment; blank lines stay blank.

    With ``capitalize`` a line opens a sentence after a line that ended one,
    and after a blank line (a paragraph break); a model with a truecasing head
    also writes the names and acronyms it recognises. ``formatter``
    (:class:`streampunct.text.written_form.Formatter`) writes lexicon phrases and,
    with ITN, numbers in their written forms. Symbol words (emoji, from
    :func:`read_transcript_lines`) are not sent to the model: the words around
    them are punctuated as if they were not there, and they are written in
    their place, as they are, with no mark
    (:func:`streampunct.text.normalize.render_with_symbols`). ``affixes`` (from
    :func:`read_transcript_segments`): the symbols written around each line's words.
    """
    from streampunct.labels import PERIOD, QUESTION
    from streampunct.text.normalize import NO_AFFIX, is_symbol_word, render, render_with_symbols

    def render_words(words: list[str], labels: list[int], cases: list[int] | None, sentence_start: bool,
                     word_affixes: list[Affix] | None = None) -> str:
        if formatter is not None and formatter.active:
            return formatter.render(words, labels, cases or (), sentence_start=sentence_start,
                                    affixes=word_affixes or ())
        return render(words, labels, capitalize=capitalize, sentence_start=sentence_start, cases=cases,
                      affixes=word_affixes)

    if affixes is not None and len(affixes) != len(segments):
        raise ValueError(f"{len(segments)} segments but {len(affixes)} lists of affixes")
    out = []
    sentence_start = True
    for n, tokens in enumerate(segments):
        line_affixes = list(affixes[n]) if affixes is not None else None
        if not tokens:
            out.append("")
            sentence_start = True
            continue
        words = [t for t in tokens if not is_symbol_word(t)]
        labels: list[int] = []
        cases = None
        if not words:
            pass
        elif capitalize and punctuator.has_case:
            labels, cases = punctuator.labels_and_cases(words)
        else:
            labels = punctuator.punctuate(words)
        if len(words) == len(tokens):
            shown = line_affixes if line_affixes and any(a != NO_AFFIX for a in line_affixes) else None
            out.append(render_words(words, labels, cases, sentence_start, shown))
        else:
            out.append(render_with_symbols(tokens, labels, render_words, cases=cases, sentence_start=sentence_start,
                                           affixes=line_affixes))
        if labels:
            sentence_start = labels[-1] in (PERIOD, QUESTION)
    return out


def run(args: argparse.Namespace) -> int:
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.text.itn import load_normalizer
    from streampunct.text.textfile import AtomicTextFile, utf8_stdout, write_all
    from streampunct.text.written_form import Lexicon, WrittenForms

    read = read_transcript_segments(args.input)
    segments, affixes = [tokens for tokens, _ in read], [line for _, line in read]
    # where the text goes, before any work: a wrong --out, or a closed stdout, costs no model run
    out = AtomicTextFile(args.out) if args.out not in (None, "-") else None
    try:
        stdout = utf8_stdout() if out is None else None
        written = WrittenForms(Lexicon(args.lexicon), load_normalizer(args.itn_cache) if args.itn else None)
        formatter = written.formatter(itn=args.itn, lexicon=(), capitalize=args.capitalize)
        punctuator = OfflineDecoder.from_model_dir(args.model, engine=args.engine, **dict(args.engine_option))
        try:
            text = "\n".join(punctuate_lines(segments, punctuator, capitalize=args.capitalize,
                                             formatter=formatter, affixes=affixes))
        finally:
            punctuator.close()
        if out is not None:
            out.file.write(text + "\n")
    except BaseException:
        if out is not None:
            out.discard()  # what was at --out stays as it was
        raise
    if out is not None:
        out.commit()  # whole or not at all
    else:
        assert stdout is not None
        write_all(stdout, text + "\n")  # a reader gone midway (`| head -c 100`): status 141
    return 0
