"""Word normalization for ASR input and rendering of words + labels back to text.

The model reads lowercase words without punctuation. ASR gateways send words
that may carry marks (``hello,``), odd casing or stray symbols; this module
turns them into the model's form and back into readable text.

Offline (``streampunct punctuate``), a word made only of symbols (emoji,
``™``, ``€``, ``+``, ``&``, ``%``) is kept as it is (:func:`symbol_word`,
:func:`offline_tokens`): it is not sent to the model, takes no mark, and is
written back in its place (:func:`render_with_symbols`). In a stream it takes no
index (indices count the words client and server both normalize), but a final's
``text`` shows it where offline text would
(``streampunct.core.session_protocol``, :func:`unit_symbol`).

The symbols at an ordinary word's edges (``$1,000``, ``50%``, ``c++``) are not the
model's, but ``text`` writes them back around the word (:func:`surface_affixes`,
:func:`render`), in the stream and offline.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Sequence

from streampunct.errors import InputError
from streampunct.labels import CAPITALIZED, ID_TO_MARK, LOWER, MIXED, PERIOD, QUESTION, UPPER, O

#: Mojibake seen in the IWSLT files: a broken music note (U+266B) and a broken
#: right single quote, both UTF-8 bytes read as cp1252.
_MOJIBAKE = (("\u00e2\u20ac\u2122", "'"), ("\u00e2\u2122?", ""), ("\u266b", ""))
_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})
#: Clitic tokens of the IWSLT format ("do n't", "it 's"); rendered joined to the word before.
CLITICS = frozenset({"n't", "'s", "'re", "'m", "'ll", "'ve", "'d"})
#: Longest word (in characters) the service accepts; longer words are cut.
MAX_WORD_CHARS = 100
#: Letters that show nothing (Hangul fillers, NFKC folds U+FFA0 to U+3164); dropped like format characters.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0")
_ZWNJ, _ZWJ = "\u200c", "\u200d"
#: Canonical combining class of a virama (Indic scripts), after which ZWJ/ZWNJ shape a conjunct.
_VIRAMA = 9


_ENCLOSING_KEYCAP = "\u20e3"
#: Punctuation characters (category Po) that stand for a word, as symbols do ("rock & roll",
#: "fifty % of", "c # major", "@ home"), and their full-width forms; kept in symbol words. The
#: marks (``.,;:!?``, quotes, ``¡¿·…``) are not: they are what the service writes.
_SYMBOL_PUNCTUATION = frozenset("#%&*/@\\§¶†‡‰‱′″＃％＆＊／＠＼")
#: Symbols that stand for what could not be read (undecodable bytes, an object): no symbol words.
_REPLACEMENTS = frozenset("\ufffc\ufffd")


def _is_edge_junk(ch: str) -> bool:
    """Punctuation or symbol characters that are stripped at word edges."""
    cat = unicodedata.category(ch)
    return cat[0] in "PSZC"


def fix_mojibake(word: str) -> str:
    """Undo the cp1252 mojibake found in the IWSLT files."""
    for bad, good in _MOJIBAKE:
        if bad in word:
            word = word.replace(bad, good)
    return word


def drop_invisible(word: str) -> str:
    """``word`` without the characters a reader cannot see but a display obeys.

    Dropped: control characters (category Cc: NUL, escapes, tabs), format
    characters (Cf: the bidi controls U+200E/U+200F, U+202A-U+202E,
    U+2066-U+2069 and U+061C; the zero-width U+200B, U+2060 and U+FEFF; the
    soft hyphen; tag characters), lone surrogates (Cs, which JSON's
    ``\\udXXX`` escapes can carry but which are not text) and the Hangul
    fillers (letters that show nothing). The two joiners stay only where a
    script needs them, the contexts of RFC 5892's CONTEXTJ rules: ZWJ and
    ZWNJ after a virama (Indic conjuncts), and ZWNJ between two Arabic-script
    letters (Persian and Urdu words such as U+0645 U+06CC U+200C U+062E).
    Emoji are stripped as symbols anyway, so the ZWJ of an emoji sequence
    goes too (offline, a word made only of symbols is kept: :func:`symbol_word`;
    around a word, they are written back in ``text``: :func:`surface_affixes`).
    """
    if word.isascii():
        return word if word.isprintable() else "".join(ch for ch in word if ch.isprintable())
    if word.isprintable() and _BLANK_LETTERS.isdisjoint(word):
        return word
    out: list[str] = []
    for k, ch in enumerate(word):
        if ch in _BLANK_LETTERS:
            continue
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs"):
            joiner = ch == _ZWJ or ch == _ZWNJ
            if joiner and out and k + 1 < len(word) and _joiner_needed(ch, out[-1], word[k + 1]):
                out.append(ch)
            continue
        out.append(ch)
    return "".join(out)


def _joiner_needed(joiner: str, before: str, after: str) -> bool:
    if unicodedata.combining(before) == _VIRAMA:
        return True
    return joiner == _ZWNJ and _arabic_letter(before) and _arabic_letter(after)


def _arabic_letter(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "L" and unicodedata.name(ch, "").startswith("ARABIC")


def normalize_word(word: str) -> str:
    """The model's form of one ASR word: lowercase, no punctuation at the edges.

    Inner apostrophes and hyphens stay (``don't``, ``well-being``); a leading
    apostrophe stays in a clitic, an elision or a year (``'s``, ``'cause``, ``'90s``:
    :data:`ELISIONS`), but not in a word that an apostrophe also closes (``'yes'``, a quote),
    nor before another word (``'no`` of ``'no way'``: a quote's opening); a plural
    possessive's apostrophe (``students'``) goes here and comes back in ``text``
    (:func:`surface_affixes`); the result
    is ``""`` when nothing but punctuation was there. Words longer than
    ``MAX_WORD_CHARS`` are cut to that length. Invisible characters are
    dropped first (:func:`drop_invisible`: controls, format characters such as
    bidi controls and zero-width spaces, lone surrogates), and a word of
    combining marks alone (``"\u0301"``, ``"\ufe0f"``) is ``""``. A normalized word
    normalizes to itself (clients send words normalized; the server normalizes
    them again and must count them alike).
    """
    w = _normalize_once(word)
    if w.isascii() and len(w) < MAX_WORD_CHARS:  # nothing one more pass would change
        return w
    # Lowercasing ("İ" + a mark), removing inner spaces and the cut can leave what one more
    # pass changes (marks out of canonical order, a "-" or a joiner at the end): to a fixed point.
    for _ in range(4):
        again = _normalize_once(w)
        if again == w:
            break
        w = again
    return w


def _normalize_once(word: str) -> str:
    w = fix_mojibake(drop_invisible(word)).translate(_APOSTROPHES)
    if not w.isascii():
        # Symbols go before NFKC, which folds some into letters ("™" -> "tm", "№" -> "no",
        # "℃" -> "c"): a word of symbols is dropped, not read as letters.
        w = _strip_edges(w)
        w = unicodedata.normalize("NFKC", w).translate(_APOSTROPHES)
    w = _strip_edges(w.lower())
    if any(ch.isspace() for ch in w):
        w = "".join(w.split())
    if w and all(_is_mark(ch) for ch in w):
        return ""  # marks with no letter to carry them show nothing
    return w[:MAX_WORD_CHARS]


def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "M"


def _strip_edges(w: str) -> str:
    """``w`` without the punctuation, symbols and spaces at its edges, each with the marks
    that belong to it (an emoji's variation selector U+FE0F, a keycap's U+20E3: a character
    in an enclosing mark is a symbol too, as in :func:`symbol_word`). A leading apostrophe
    stays in a clitic, an elision or a year (``'s``, ``'cause``, ``'90s``: :data:`ELISIONS`),
    unless one closes the word too (``'yes'``: a quote); before another word it opens a
    quote and goes (``'no``)."""
    start, end = _edge_span(w)
    return w[start:end]


#: Words that a leading apostrophe begins, as a part of them (the clitics of the IWSLT format and
#: the common elisions); before any other word it opens a quote (``'no way'``) and is dropped.
ELISIONS = CLITICS | frozenset({
    "'t", "'em", "'cause", "'cos", "'coz", "'cuz", "'til", "'till", "'bout", "'round", "'n", "'tis",
    "'twas", "'twere", "'twill", "'kay", "'sup", "'nuff", "'fraid", "'scuse", "'ere", "'ol",
})


def _edge_span(w: str) -> tuple[int, int]:
    """Where :func:`_strip_edges` cuts ``w``: ``w[start:end]`` is what it keeps."""
    start, end = _edge_clusters(w, _junk_first, _junk_last)
    if start < end and w[start] == "'" and ("'" in w[end:] or not _elision(w[start:end])):
        start += 1  # a quote ('yes', 'yes,', or 'no of 'no way'), not a clitic or an elision
    return start, end


def _elision(core: str) -> bool:
    """``core`` (starting with an apostrophe) is a word of its own, not a quote's opening: a
    clitic or an elision (:data:`ELISIONS`: ``'s``, ``'cause``, ``'em``) or a year (``'90s``)."""
    if unicodedata.category(unicodedata.normalize("NFKC", core[1:2])[:1] or " ").startswith("N"):
        return True  # a number after NFKC, as the caption page checks (\p{N})
    key = core.lower() if core.isascii() else unicodedata.normalize("NFKC", core).translate(_APOSTROPHES).lower()
    return key in ELISIONS


def _junk_first(w: str, start: int, j: int) -> bool:
    ch = w[start]
    if ch == "'" and start + 1 < len(w) and w[start + 1].isalnum():
        return False
    return _is_edge_junk(ch) or ch.isspace() or any(unicodedata.category(m) == "Me" for m in w[start + 1 : j])


def _junk_last(w: str, start: int, end: int) -> bool:
    base = w[start]
    return _is_edge_junk(base) or base.isspace() or any(unicodedata.category(m) == "Me" for m in w[start + 1 : end])


def _edge_clusters(w: str, strip_first: Callable[[str, int, int], bool],
                   strip_last: Callable[[str, int, int], bool]) -> tuple[int, int]:
    """``(start, end)``: ``w`` without the clusters (a character and the marks after it) at its
    edges that the predicates strip, each asked ``(w, cluster start, cluster end)`` in turn
    from the outside in; marks with no base before them end the walk from the end."""
    start, end = 0, len(w)
    while start < end:
        j = start + 1
        while j < end and _is_mark(w[j]):
            j += 1
        if not strip_first(w, start, j):
            break
        start = j
    while end > start:
        j = end  # the last cluster starts at its base, w[j - 1]
        while j > start and _is_mark(w[j - 1]):
            j -= 1
        if j == start or not strip_last(w, j - 1, end):
            break
        end = j - 1
    return start, end


#: A word's symbols that ``text`` shows around its normalized form: (before, after).
Affix = tuple[str, str]
NO_AFFIX: Affix = ("", "")
#: Short groups of letters joined by dots ("u.s", "e.g", "ph.d"): such a word keeps a final dot
#: in ``text`` (not "www.example.com", whose final dot is a sentence's).
_DOTTED = re.compile(r"(?:[^\W\d_]{1,2}\.)+[^\W\d_]{1,2}")
#: Most characters of symbols kept on one side of a word (whole symbols: an emoji is not cut).
MAX_AFFIX_CHARS = 32
#: Most marks kept after one symbol (a variation selector, a keycap; not a pile of accents).
_MAX_SYMBOL_MARKS = 4


def surface_affixes(word: str) -> Affix:
    """The symbols at the edges of an ASR word that :func:`normalize_word` strips and
    ``text`` shows again around the word: ``$1,000`` -> ``("$", "")``, ``50%`` ->
    ``("", "%")``, ``c++`` -> ``("", "++")``, ``#metoo`` -> ``("#", "")``, ``great👍`` ->
    ``("", "👍")``.

    Symbols are those of :func:`symbol_word` (Unicode categories So, Sm, Sc, Sk, with their
    marks, and the punctuation that stands for a word: ``%``, ``&``, ``#``, ``@``...), kept
    as typed (an emoji's joiners too: ``👩‍💻``) but for a full-width form that NFKC folds to
    one symbol (``％`` -> ``%``); the marks and quotes around them are dropped as from every
    word (``"$5,"`` -> ``$``). Before a number, a minus and a decimal point are kept too
    (``-$5``, ``$.99``, ``-.5``); after letters joined by dots, the final dot (``u.s.`` ->
    ``("", ".")``, ``Ph.D.``), which a period after the word does not double
    (:func:`render`); after a word ending with ``s`` that no apostrophe opened, the apostrophe
    of a plural possessive (``students'`` -> ``("", "'")``, ``Jones'``; not ``'yes'``, a
    quote). A word made only of symbols has none (it is no word in a stream;
    offline it is a symbol word). Each side keeps whole symbols, at most
    ``MAX_AFFIX_CHARS`` characters, those nearest the word.
    """
    w = word.translate(_APOSTROPHES)
    start, end = _edge_span(w)
    if start == end or (start == 0 and end == len(w)):
        return NO_AFFIX
    core = w[start:end]
    before = _symbols(w[:start], number=core[0].isdigit())
    after = _symbols(w[end:])
    if w[end : end + 1] == "." and _DOTTED.fullmatch(core):
        after.insert(0, ".")
    elif _possessive_apostrophe(w, start, end):
        after.insert(0, "'")
    if not before and not after:
        return NO_AFFIX
    return "".join(_cut(before[::-1])[::-1]), "".join(_cut(after))


def _possessive_apostrophe(w: str, start: int, end: int) -> bool:
    """The apostrophe right after ``w[start:end]`` (what normalization keeps of ``w``) ends a
    plural possessive (``students'``, ``Jones'``): the word ends with an ``s`` and no apostrophe
    before it opened a quote (``'yes'``, ``'bosses'`` are quoted words)."""
    return w[end : end + 1] == "'" and w[end - 1] in "sS" and "'" not in w[:start]


def _cut(clusters: list[str]) -> list[str]:
    """The first of ``clusters`` that fit in ``MAX_AFFIX_CHARS`` characters."""
    out, size = [], 0
    for cluster in clusters:
        size += len(cluster)
        if size > MAX_AFFIX_CHARS:
            break
        out.append(cluster)
    return out


def _symbols(edge: str, *, number: bool = False) -> list[str]:
    """The symbols of ``edge`` (one side of a word, outside what normalization keeps), in order,
    each with its marks (at most ``_MAX_SYMBOL_MARKS``); a ZWJ between two symbols joins them.
    With ``number`` (the word starts with a digit), a ``-`` (once) and a ``.`` right before
    the word too."""
    out: list[str] = []
    k, symbol_end, joined, minus = 0, -1, False, False
    while k < len(edge):
        ch = edge[k]
        if ch == _ZWJ:
            joined = symbol_end == k
            k += 1
            continue
        j = k + 1
        while j < len(edge) and _is_mark(edge[j]):
            j += 1
        cluster = edge[k : min(j, k + 1 + _MAX_SYMBOL_MARKS)]
        if not ch.isspace() and _symbol_cluster(cluster):  # a keycap on a space is none
            if len(cluster) == 1 and len(folded := unicodedata.normalize("NFKC", cluster)) == 1 and _is_symbol(folded):
                cluster = folded  # a full-width "％" as "%"
            if joined:
                out[-1] += _ZWJ + cluster
            else:
                out.append(cluster)
            symbol_end = j
        elif number and ch == "-" and not minus:
            out.append("-")
            minus = True
        elif number and ch == "." and j == len(edge):
            out.append(".")
        joined = False
        k = j
    return out


def affix_of(raw: str, word: str) -> Affix:
    """:func:`surface_affixes` of ``raw``, whose normalized form is ``word`` (most words have
    none: the cheap tests first); none when the word written with them would not read back
    as ``word`` with them (odd marks or invisible characters at its edges: "\u200d\u0301@1",
    "-'\u200d1"), so that a client finds the word inside them and sends what the server
    reads alike (:func:`sending_form`)."""
    if raw == word or raw.isalpha():
        return NO_AFFIX
    affix = surface_affixes(raw)
    if affix is not NO_AFFIX:
        shown = affix[0] + word + affix[1]
        if normalize_word(shown) != word or surface_affixes(shown) != affix:
            return NO_AFFIX
    return affix


def sending_form(word: str) -> str:
    """``word`` as a client sends it: normalized (:func:`normalize_word`) with the symbols that
    ``text`` shows around it kept (:func:`surface_affixes`: ``$1,000``, ``c++``, ``u.s.``);
    ``""`` when it normalizes to nothing. The server reads it as the same normalized word."""
    w = normalize_word(word)
    if not w:
        return ""
    before, after = affix_of(word, w)
    return before + w + after


def split_affixes(token: str) -> tuple[str, str, str]:
    """``token`` (a piece of ``text``, its mark stripped) as (symbols before, the rest, symbols
    after): what :func:`render` wrote around a word from :func:`surface_affixes` (``$1,000``
    -> ``("$", "1,000", "")``, ``C++`` -> ``("", "C", "++")``, ``-$.5`` -> ``("-$.", "5", "")``,
    ``students'`` -> ``("", "students", "'")``).
    Clients match the rest to the word (:func:`written_length`)."""
    start, end = _edge_clusters(token, _symbol_first, _symbol_last)
    return token[:start], token[start:end], token[end:]


def _symbol_first(w: str, start: int, j: int) -> bool:
    return _symbol_cluster(w[start:j]) or w[start] in "-.\u200d"


def _symbol_last(w: str, start: int, end: int) -> bool:
    return _symbol_cluster(w[start:end]) or w[start] in ".'\u200d"


def normalize_words(words: Iterable[str]) -> list[str]:
    """Normalize each word and drop the ones that become empty."""
    out = []
    for word in words:
        w = normalize_word(word)
        if w:
            out.append(w)
    return out


def _is_symbol(ch: str) -> bool:
    return unicodedata.category(ch)[0] == "S" or ch in _SYMBOL_PUNCTUATION


def _symbol_cluster(cluster: str) -> bool:
    """A base character with its marks that shows a symbol: a symbol (category S: So, Sm, Sc,
    Sk, or one of :data:`_SYMBOL_PUNCTUATION`: ``&``, ``%``, ``#``, ``@``...) or any character
    in an enclosing mark (the keycap of ``#️⃣`` and ``1️⃣``)."""
    return _is_symbol(cluster[0]) or any(unicodedata.category(ch) == "Me" for ch in cluster[1:])


def symbol_word(word: str) -> str:
    """The word as shown when it is made only of symbols, else ``""``.

    A symbol word holds symbols (Unicode categories So, Sm, Sc, Sk: emoji,
    ``™``, ``°``, ``€``, ``+``, ``→``; and the punctuation that stands for a word:
    ``&``, ``%``, ``#``, ``@``, ``*``, ``/``, ``\\``, ``§``, ``¶``, ``†``, ``‡``, ``‰``,
    ``′``, ``″``), each with the marks that follow it
    (variation selectors, skin tones are Sk, keycaps), and nothing else once
    the punctuation and spaces at its edges are stripped, as they are from
    every word (``🍕,`` -> ``🍕``); a letter, a digit or inner punctuation makes it
    an ordinary word. What a reader cannot see is dropped as from every word
    (:func:`drop_invisible`: controls, bidi controls, zero-width characters,
    tag characters), but for the zero-width joiner between two symbols, which
    makes one emoji of them (``👩‍💻``), and so are U+FFFD and U+FFFC, which
    stand for bytes that could not be decoded. The rest is kept exactly (no NFKC:
    ``™`` stays ``™``), cut to ``MAX_WORD_CHARS`` characters at a symbol's end.
    """
    if not any(_is_symbol(ch) or ch == _ENCLOSING_KEYCAP for ch in word):
        return ""
    clusters: list[str] = []
    joined = False  # a ZWJ came after the last cluster
    for ch in word:
        category = unicodedata.category(ch)
        if ch == _ZWJ:
            joined = bool(clusters)
            continue
        if category in ("Cc", "Cf", "Cs") or ch in _BLANK_LETTERS or ch in _REPLACEMENTS:
            continue
        if category[0] == "M" and clusters:
            clusters[-1] += ch
            continue
        if joined and _is_symbol(ch) and _symbol_cluster(clusters[-1]):
            clusters[-1] += _ZWJ + ch
        else:
            clusters.append(ch)
        joined = False

    def edge(cluster: str) -> bool:
        return unicodedata.category(cluster[0])[0] in "PZ" and not _symbol_cluster(cluster)

    start, end = 0, len(clusters)
    while start < end and edge(clusters[start]):
        start += 1
    while end > start and edge(clusters[end - 1]):
        end -= 1
    kept = clusters[start:end]
    if not kept or not all(_symbol_cluster(c) for c in kept):
        return ""
    out, size = [], 0
    for cluster in kept:
        size += len(cluster)
        if size > MAX_WORD_CHARS and out:
            break
        out.append(cluster)
    return "".join(out)[:MAX_WORD_CHARS]


def is_symbol_word(token: str) -> bool:
    """``token`` (from :func:`offline_tokens`) is a symbol word, not one of the model's words."""
    return bool(token) and symbol_word(token) == token


def offline_tokens(words: Iterable[str]) -> tuple[list[str], list[Affix]]:
    """:func:`normalize_words`, but a word made only of symbols is kept as :func:`symbol_word`
    shows it (the offline rule): the model's words and symbol words, in order; and the symbols
    around each (:func:`surface_affixes`; a symbol word has none), for
    :func:`render_with_symbols`."""
    tokens: list[str] = []
    affixes: list[Affix] = []
    for word in words:
        symbols = symbol_word(word)
        w = symbols or normalize_word(word)
        if w:
            tokens.append(w)
            affixes.append(NO_AFFIX if symbols else affix_of(word, w))
    return tokens, affixes


def render_with_symbols(
    tokens: Sequence[str],
    labels: Sequence[int],
    render_words: Callable[[list[str], list[int], list[int] | None, bool, list[Affix] | None], str],
    *,
    cases: Sequence[int] | None = None,
    sentence_start: bool = True,
    affixes: Sequence[Affix] | None = None,
) -> str:
    """Text of :func:`offline_tokens` tokens: each symbol word in its place, as it is, with no mark.

    ``labels`` (and ``cases``) are those of the model's words alone, punctuated
    as if the symbol words were not there; ``affixes`` (:func:`offline_tokens`), if given,
    those of every token. ``render_words(words, labels, cases, sentence_start,
    affixes)`` writes each run of model words between symbol
    words (:func:`render`, or a formatter's); a run opens a sentence when the
    run before it ended one, so ``pizza 🍕 ok`` is written ``Pizza 🍕 ok.``.
    A unit after a word (``%``, ``°``, a currency sign that no number follows:
    :func:`unit_symbol`) takes that word's mark after it: ``the rate is 50 %`` is
    written ``The rate is 50 %.``, not ``50. %``.
    """
    if affixes is not None and len(affixes) != len(tokens):
        raise ValueError(f"{len(tokens)} tokens but {len(affixes)} affixes")
    pieces: list[str] = []
    run: list[str] = []
    run_affixes: list[Affix] = []
    k = 0
    held = ""  # the mark of the run before the units that follow it, written after them

    def flush(hold: bool = False) -> None:
        nonlocal k, sentence_start, run, run_affixes, held
        if run:
            n = len(run)
            run_labels = list(labels[k : k + n])
            run_cases = list(cases[k : k + n]) if cases else None
            shown = run_affixes if any(a != NO_AFFIX for a in run_affixes) else None
            ends_sentence = run_labels[-1] in (PERIOD, QUESTION)
            if hold:
                held, run_labels[-1] = ID_TO_MARK[run_labels[-1]], O
            pieces.append(render_words(run, run_labels, run_cases, sentence_start, shown))
            sentence_start = ends_sentence
            k += n
            run, run_affixes = [], []

    def let_go() -> None:
        nonlocal held
        if held:
            pieces[-1] += held
            held = ""

    for i, token in enumerate(tokens):
        if is_symbol_word(token):
            after = tokens[i + 1] if i + 1 < len(tokens) else ""
            if unit_symbol(token, after) and (run or held):
                flush(hold=True)  # the units after a word take its mark ("50 %.")
            else:
                flush()
                let_go()
            pieces.append(token)
        else:
            let_go()
            run.append(token)
            run_affixes.append(affixes[i] if affixes is not None else NO_AFFIX)
    flush()
    let_go()
    if k != len(labels):
        raise ValueError(f"{k} words but {len(labels)} labels")
    return " ".join(pieces)


def unit_symbol(token: str, after: str) -> bool:
    """A symbol word that reads as a unit of the word before it: a percent or per-mille sign,
    a degree sign, or a currency sign that no number follows (``5 €``, not ``$ 20``)."""
    if unicodedata.category(token[0]) == "Sc":
        return not after[:1].isdigit()
    return token[0] in "%\u2030\u2031\u00b0\u2103\u2109"


def _capitalize(word: str) -> str:
    """``word`` with its first letter in title case (after a leading apostrophe: ``'Cause``);
    a letter whose title case is not one character (``ß`` -> ``Ss``) stays as it is, so the
    word keeps its length and clients can match it to the word (:func:`written_length`)."""
    k = 1 if word[:1] == "'" and len(word) > 1 else 0
    first = word[k : k + 1]
    title = first.title()
    if len(title) != 1:
        title = first
    return word[:k] + title + word[k + 1 :]


def case_forms(word: str) -> tuple[str, ...]:
    """The ways the service writes a lowercase ``word``: as it is, capitalized (a sentence's
    first word, a learned capital) and in upper case (which may be longer: ``straße`` ->
    ``STRASSE``)."""
    forms = (word, _capitalize(word), word.upper())
    upper = apply_case(word, UPPER)  # a possessive after capitals: "STRASSE's"
    return forms if upper in forms else (*forms, upper)


def written_length(text: str, pos: int, word: str) -> int:
    """How many characters of ``text`` from ``pos`` write ``word`` in one of its
    :func:`case_forms` (or in any case, letter for letter); -1 if they do not. Clients match a
    final's ``text`` back to its words with it (lowercasing the text would miss ``Irmak`` for
    ``ırmak`` and ``STRASSE`` for ``straße``)."""
    if not word:
        return -1
    if text[pos : pos + len(word)].lower() == word:
        return len(word)
    return next((len(f) for f in case_forms(word) if text.startswith(f, pos)), -1)


def spelled_pieces(core: str, words: Sequence[str], k: int = 0) -> list[str] | None:
    """The pieces of ``core`` (a token of ``text``, its mark stripped) that write ``words[k],
    words[k + 1], ...`` (a word and the clitics joined to it, :func:`written_length`), or None
    when ``core`` is not those words written out. The input's symbols that :func:`render`
    wrote around them (``$1,000``, ``C++``: :func:`split_affixes`) go with the first and the
    last piece. Clients match a final's ``text`` back to its words with it."""
    pieces = _spelled_exactly(core, words, k)
    if pieces is None:
        before, inner, after = split_affixes(core)
        if inner != core and (pieces := _spelled_exactly(inner, words, k)) is not None:
            pieces[0] = before + pieces[0]
            pieces[-1] += after
    return pieces


def _spelled_exactly(core: str, words: Sequence[str], k: int) -> list[str] | None:
    pieces: list[str] = []
    pos = 0
    while k + len(pieces) < len(words) and pos < len(core):
        n = written_length(core, pos, words[k + len(pieces)])
        if n < 0:
            return None
        pieces.append(core[pos : pos + n])
        pos += n
    return pieces if pieces and pos == len(core) else None


def _is_pronoun_i(word: str) -> bool:
    return word == "i" or word.startswith("i'")


_POSSESSIVE = "'s"
_INITIALISM = re.compile(r"[^\W\d_](?:\.[^\W\d_])+\.?")  # "u.n", "u.s.": normalized, the last dot may go


def apply_case(word: str, case: int) -> str:
    """A lowercase word written in a case class of ``streampunct.labels.CASE_LABELS``.

    MiXed case cannot be rebuilt from a lowercase word; it is shown Capitalized. A possessive
    stays lowercase after a word in upper case (``IBM's``), and an initialism spelled with
    dots is written in capitals when its class is not lowercase (``U.N.'s``, not ``U.n.'s``).
    """
    stem, suffix = (word[:-2], _POSSESSIVE) if word.endswith(_POSSESSIVE) and len(word) > 2 else (word, "")
    if case == UPPER or (case != LOWER and _INITIALISM.fullmatch(stem)):
        return stem.upper() + suffix
    if case in (CAPITALIZED, MIXED):
        return _capitalize(word)
    return word


def render(
    words: Sequence[str],
    labels: Sequence[int],
    *,
    capitalize: bool = False,
    sentence_start: bool = True,
    join_clitics: bool = True,
    cases: Sequence[int] | None = None,
    verbatim: Sequence[bool] | None = None,
    affixes: Sequence[Affix] | None = None,
) -> str:
    """Words with their punctuation as text.

    ``labels`` are class ids (see :mod:`streampunct.labels`). With
    ``capitalize`` the first word of each sentence and the pronoun "i" are
    capitalized; ``sentence_start`` says whether ``words[0]`` opens a sentence
    (False when rendering the middle of a stream after a comma or no mark).
    Clitic tokens of the IWSLT format (``do n't``) are joined to the word
    before them unless ``join_clitics`` is False. ``cases`` (a truecasing
    head's class per word) overrides the rules where it says a word is not
    lowercase (names, acronyms); the rules still open sentences and write "I".
    ``verbatim`` marks words shown exactly as given (written forms such as
    "$25" or "iPhone": no case rule touches them). ``affixes`` (:func:`surface_affixes`)
    are the symbols written around each word (``$1,000``, ``50%``);
    a period after an affix that ends with a dot (``U.S.``) is not written twice.
    """
    if affixes is not None and len(affixes) != len(words):
        raise ValueError(f"{len(words)} words but {len(affixes)} affixes")
    if len(words) != len(labels) or (cases is not None and len(cases) != len(words)):
        raise ValueError(f"{len(words)} words but {len(labels)} labels"
                         + (f" and {len(cases)} case classes" if cases is not None else ""))
    parts: list[str] = []
    starts_sentence = sentence_start
    previous = O  # the label of the word before: a clitic joins a word with no mark
    for k, (word, label) in enumerate(zip(words, labels, strict=True)):
        shown = word
        if verbatim is not None and verbatim[k]:
            pass
        elif capitalize and cases is not None and cases[k] != LOWER:
            shown = apply_case(word, cases[k])  # the model's truecasing head
        elif capitalize and (starts_sentence or _is_pronoun_i(word)):
            shown = _capitalize(word)
        mark = ID_TO_MARK[label]
        if affixes is not None and affixes[k] != NO_AFFIX:
            before, after = affixes[k]
            shown = before + shown + after
            if label == PERIOD and after.endswith("."):
                mark = ""
        if verbatim is not None and verbatim[k] and (
                label == PERIOD and shown.endswith(("!", "?")) or label == QUESTION and shown.endswith("?")):
            mark = ""  # a written form's own mark ends it: "Yahoo!", not "Yahoo!."
        if join_clitics and parts and word in CLITICS and previous == O:
            parts[-1] += shown + mark
        else:
            parts.append(shown + mark)
        starts_sentence = label in (PERIOD, QUESTION)
        previous = label
    return " ".join(parts)


def join_texts(texts: Iterable[str]) -> str:
    """Finals' texts (or pieces of them) as one text: a space between them, but none before a text
    that starts with a clitic ("'s", "n't") after a word with no mark, as the subtitles join them
    ("New York" + "'s" = "New York's")."""
    if isinstance(texts, str):
        raise InputError("join_texts takes several texts (finals' .text), not one str")
    out = ""
    for text in texts:
        if not isinstance(text, str):
            raise InputError(f"join_texts takes str texts, not {type(text).__name__}")
        if not text:
            continue
        first = text.split(maxsplit=1)[0].rstrip(",.?!;:").lower()
        glued = first in CLITICS and out and not out.endswith((",", ".", "?", "!", ";", ":"))
        out = f"{out}{text}" if glued or not out else f"{out} {text}"
    return out
