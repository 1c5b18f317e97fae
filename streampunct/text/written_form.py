"""Written forms in ``text``: phrases of spoken words written as one form, kept whole across finals.

Pure: no I/O, no clock. Two sources of *phrases* (consecutive words written
as one form):

* a :class:`Lexicon`: spoken phrases (normalized words) and how to write
  them ("new york" -> "New York", "i phone" -> "iPhone"); the longest match wins;
* a :class:`Normalizer`: inverse text normalization (ITN) of numbers,
  dates, times, money ("twenty five dollars" -> "$25");
  :mod:`streampunct.text.itn` has NeMo's WFST grammars behind it.

A phrase never contains a punctuation mark inside it: the words of a phrase
all have the label ``O`` but the last, whose mark follows the written form.
The lexicon is matched first; ITN writes the stretches between its matches.
Words and their labels are never changed: only ``text`` is.

:class:`FinalTexts` keeps a written form whole across finals in a stream:
a final's ``text`` stops before a phrase that goes on into the words the
server has received but not finalized yet (its right context), and the
final that finalizes the phrase's last word writes the whole phrase
(``docs/protocol.md``, "Written forms across finals").
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any, Protocol

from streampunct.labels import COMMA, LOWER, PERIOD, QUESTION, O
from streampunct.text.normalize import NO_AFFIX, Affix, normalize_word, render, symbol_word
from streampunct.text.textfile import split_lines

#: Most words in a lexicon's spoken phrase.
MAX_LEXICON_PHRASE_WORDS = 8
#: Most characters in one side of a lexicon pair.
MAX_LEXICON_ENTRY_CHARS = 256
#: The joiners a written form may hold (emoji sequences "👩\u200d💻", Persian and Indic words).
_JOINERS = frozenset("\u200c\u200d")
#: Most words a stream holds back for a phrase that goes on past a final; a
#: longer run is written as it is (the one case where a written form can be
#: cut between finals).
MAX_HELD_WORDS = 32
#: Words after a final's last number word that may go on with it ("one hundred | and five").
_GOES_ON = ("and", "point", "oh")  # "one hundred and", "three point", "nineteen oh" (five)
#: Currency signs of written money: whole units at a pause may go on ("$2", then "and fifty cents").
_CURRENCY = "$€£¥"
#: Letters that go on with a number as a time does ("seven p" before "m": "7 p.m.").
_TIME_LETTERS = ("a", "p")
#: Words that go on with a number or a fraction of an hour as a time does ("ten past" or
#: "quarter to" before "nine": "9:10", "8:45").
_TIME_LINKS = ("past", "to")
#: Openers a time link may follow ("half past", "quarter to").
_HOUR_FRACTIONS = ("half", "quarter")
#: The word that goes on with an ordinal as a date does ("the fourth" before "of july": "July 4").
_DATE_LINK = "of"
#: How an ordinal number word ends ("fourth", "twenty-first", "second").
_ORDINAL_ENDINGS = ("th", "first", "second", "third")
#: Final words already written that the next phrases see as left context (a cue such as
#: "in" before "two thousand and twelve": a year, 2012, not a count, 2,012).
LEFT_CONTEXT_WORDS = 3
#: How many of a resume's last context words :meth:`FinalTexts._inferred_held` replays (a held
#: phrase longer than that is taken as written from there): with the grammars, 16 words cost
#: about 60 ms once per such resume, 32 about 150 ms.
INFER_REPLAY_WORDS = 16


@dataclass(frozen=True)
class Phrase:
    """Words ``start .. end-1`` of a sequence written as ``text``.

    ``whole``: one written form that the normalizer made of all its words (one
    number, date, time...), so that a comma the punctuation model put between
    them ("march, fifth") is not shown; False for several forms side by side
    ("10 20 30" of "ten, twenty, thirty"), which keep their commas.

    ``text`` "": no written form; the words are written as spoken, and the
    phrase only keeps them together across finals (a stretch the grammars
    read as something left spoken, such as "seven forty five a" before "m").
    """

    start: int
    end: int
    text: str
    whole: bool = True


class Normalizer(Protocol):
    """Inverse text normalization of one run of lowercase words with no mark inside.

    ``phrases`` returns the phrases it writes (sorted, not overlapping,
    indices into ``words``); words outside them stay as spoken. It must be
    deterministic: the same words give the same phrases.

    A normalizer whose ``answers_at_once`` attribute is true honours
    :func:`without_waiting`: within it, a call that would have to run its
    grammars (words with a number word near them and no cached answer) raises
    :class:`WouldWait` instead, and the others answer at once. Any other
    normalizer is not called there at all (:class:`Formatter` raises
    :class:`WouldWait` for it).

    ``first``, ``until``: the caller needs only the phrases with a word in
    ``words[first:until]`` (None: to the end); the words around them are
    context, and a phrase wholly outside may be left out. That spares the
    searches of a stream's words already written (left context) and of the
    words after a final that no phrase of the final's own words reaches.
    """

    def phrases(self, words: Sequence[str], *, first: int = 0, until: int | None = None) -> list[Phrase]: ...


class WouldWait(Exception):
    """A normalizer called inside :func:`without_waiting` would have had to run its grammars.

    ``fetch`` (None: the normalizer has none): starts the search it would have
    waited for elsewhere (a worker process) and returns its future; once that is
    done, the same call answers at once. A caller on the event loop awaits it
    (no thread blocks on the grammars) and asks again.
    """

    def __init__(self, words: str, fetch: Callable[[], Future[Any]] | None = None) -> None:
        super().__init__(words)
        self.fetch = fetch


_NO_WAITING: ContextVar[bool] = ContextVar("streampunct_itn_no_waiting", default=False)


@contextmanager
def without_waiting() -> Iterator[None]:
    """Within it, normalizers answer only what they can at once (no number words, or cached)
    and raise :class:`WouldWait` otherwise: a caller on the event loop writes such texts
    in place and hands only the others to a thread."""
    token = _NO_WAITING.set(True)
    try:
        yield
    finally:
        _NO_WAITING.reset(token)


def waiting_allowed() -> bool:
    """False inside :func:`without_waiting`."""
    return not _NO_WAITING.get()


def normalize_lexicon(pairs: Iterable[Sequence[str]]) -> tuple[tuple[str, str], ...]:
    """Lexicon pairs in their effective form: the spoken side as normalized words joined by
    one space, the written side stripped. Raises ``ValueError`` naming the bad entry: among
    others a spoken word that a stream would read otherwise (:func:`_misread_word`) and a
    spoken phrase given twice."""
    out = []
    seen: dict[str, int] = {}
    for i, pair in enumerate(pairs):
        if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
            raise ValueError(f"lexicon[{i}] must be a [spoken, written] pair of strings")
        spoken, written = pair
        if len(spoken) > MAX_LEXICON_ENTRY_CHARS or len(written) > MAX_LEXICON_ENTRY_CHARS:
            raise ValueError(f"lexicon[{i}] is longer than {MAX_LEXICON_ENTRY_CHARS} characters")
        for x in spoken.split():
            if (misread := _misread_word(x)) is not None:
                raise ValueError(f"lexicon[{i}]: the spoken word {x!r} {misread}; spell it as it is said")
        words = [w for w in (normalize_word(x) for x in spoken.split()) if w]
        if not words:
            raise ValueError(f"lexicon[{i}]: the spoken phrase {spoken!r} has no words")
        if len(words) > MAX_LEXICON_PHRASE_WORDS:
            raise ValueError(f"lexicon[{i}]: the spoken phrase has {len(words)} words; "
                             f"the limit is {MAX_LEXICON_PHRASE_WORDS}")
        shown = " ".join(written.split())
        if not shown or not all(ch.isprintable() or ch in _JOINERS for ch in shown):
            raise ValueError(f"lexicon[{i}]: the written form must be printable text, not {written!r}")
        if not any(ch not in _JOINERS and unicodedata.category(ch)[0] != "M" for ch in shown):
            # joiners or marks alone show nothing: the phrase would vanish from the text
            raise ValueError(f"lexicon[{i}]: the written form {written!r} shows nothing")
        key = " ".join(words)
        if key in seen:
            raise ValueError(f"lexicon[{i}]: the spoken phrase {key!r} is already lexicon[{seen[key]}]")
        seen[key] = i
        out.append((key, shown))
    return tuple(out)


#: Marks around a word that normalizing drops without changing what it matches ("York,").
_OPEN_MARKS = "\"([{\u201c\u00ab"
_CLOSE_MARKS = "\")]}\u201d\u00bb.,;:!?'\u2019"


def _misread_word(word: str) -> str | None:
    """Why a stream would not read the spoken ``word`` as it is written, or None when it
    would (or it is only punctuation, which is dropped around every word):

    - normalizing changes it beyond case and the marks around it (``c++`` and ``c#`` are
      stored as ``c``, ``.net`` as ``net``: every "c" would be written as the entry);
    - it is only symbols, or shows no letter (marks alone), which a stream drops (``c ++``
      would be stored as ``c``)."""
    normalized = normalize_word(word)
    if not normalized:
        if symbol_word(word):
            return "is only symbols, which a stream drops"
        if not all(unicodedata.category(c)[0] == "P" for c in word):
            return "shows no letter, which a stream drops"
        return None
    core = word.lstrip(_OPEN_MARKS).rstrip(_CLOSE_MARKS)
    # letters around the core keep its own edges from being stripped: case, Unicode forms
    # and apostrophes are normalized as in every word, nothing is dropped
    return None if normalized == normalize_word(f"x{core}x")[1:-1] else f"would match {normalized!r}"


class Lexicon:
    """Spoken phrases and their written forms; later pairs override earlier ones
    (:func:`normalize_lexicon` refuses a phrase given twice in one list).

    ``layers`` are looked up last first, so a session's pairs (the last layer)
    override the server's (the first) without copying them.
    """

    def __init__(self, pairs: Iterable[tuple[str, str]] = (), *, base: Lexicon | None = None) -> None:
        own = {tuple(spoken.split()): written for spoken, written in pairs}
        prefixes = frozenset(k[:i] for k in own for i in range(1, len(k)))
        self._layers: tuple[dict[tuple[str, ...], str], ...] = ((*base._layers, own) if base else (own,))
        # proper prefixes of the entries, per layer (a server's layer is shared, never copied)
        self._prefixes: tuple[frozenset[tuple[str, ...]], ...] = (
            (*base._prefixes, prefixes) if base else (prefixes,))
        self.max_words = max((len(k) for layer in self._layers for k in layer), default=0)

    def __bool__(self) -> bool:
        return self.max_words > 0

    def __len__(self) -> int:
        return len({k for layer in self._layers for k in layer})

    def get(self, spoken: tuple[str, ...]) -> str | None:
        for layer in reversed(self._layers):
            written = layer.get(spoken)
            if written is not None:
                return written
        return None

    def open_prefix(self, words: Sequence[str]) -> int | None:
        """The first ``s`` such that ``words[s:]`` begins a longer phrase (a proper prefix of
        one), or None: where a phrase may still be completed by words not received yet."""
        for s in range(max(0, len(words) - self.max_words + 1), len(words)):
            tail = tuple(words[s:])
            if any(tail in layer for layer in self._prefixes):
                return s
        return None

    def phrases(self, words: Sequence[str]) -> list[Phrase]:
        """Leftmost-longest matches in ``words`` (a run with no mark inside)."""
        out: list[Phrase] = []
        i, n = 0, len(words)
        while i < n:
            for size in range(min(self.max_words, n - i), 0, -1):
                written = self.get(tuple(words[i : i + size]))
                if written is not None:
                    out.append(Phrase(i, i + size, written))
                    i += size
                    break
            else:
                i += 1
        return out


def _runs(labels: Sequence[int | None], ends: tuple[int, ...]) -> list[tuple[int, int]]:
    """``[a, b)`` runs of ``labels`` split after every label in ``ends`` (None is no mark)."""
    out, start = [], 0
    for i, label in enumerate(labels):
        if label in ends or i + 1 == len(labels):
            out.append((start, i + 1))
            start = i + 1
    return out


def _shifted(phrases: Sequence[Phrase], by: int) -> list[Phrase]:
    return [Phrase(p.start + by, p.end + by, p.text, p.whole) for p in phrases]


@dataclass(frozen=True)
class Formatter:
    """How one session writes ``text``: the lexicon, ITN (None: off) and sentence capitals.

    Attributes:
        lexicon: spoken phrases and their written forms (may be empty).
        normalizer: inverse text normalization (None: ``itn`` off).
        capitalize: sentence starts, "I" and learned case in the words outside phrases.
    """

    lexicon: Lexicon
    normalizer: Normalizer | None = None
    capitalize: bool = False

    @property
    def active(self) -> bool:
        """Does it write anything differently from :func:`streampunct.text.normalize.render`?"""
        return bool(self.lexicon) or self.normalizer is not None

    def phrases(self, words: Sequence[str], labels: Sequence[int | None], *, first: int = 0,
                until: int | None = None) -> list[Phrase]:
        """The phrases of ``words``; a label None (a word not labeled yet) counts as no mark.
        ``first``, ``until``: as :meth:`Normalizer.phrases` (ITN phrases wholly outside
        ``words[first:until]`` may be left out).

        No phrase spans a period or question mark. A lexicon phrase spans no
        comma either; an ITN phrase may, when it is one written form
        (:attr:`Phrase.whole`): the model's commas inside numbers ("twenty,
        twenty", "five, five, five, one...") are its most common error there.
        """
        out: list[Phrase] = []
        for a, b in _runs(labels, (PERIOD, QUESTION)):
            found = [p for c, d in _runs(labels[a:b], (COMMA,))
                     for p in _shifted(self.lexicon.phrases(words[a + c:a + d]) if self.lexicon else [], a + c)]
            if self.normalizer is not None:  # between the lexicon's phrases
                gaps = list(zip([a] + [p.end for p in found], [p.start for p in found] + [b], strict=True))
                for lo, hi in gaps:
                    found += self._itn(words, labels, lo, hi, first, until)
                found.sort(key=lambda p: p.start)
            out += found
        return out

    def _itn(self, words: Sequence[str], labels: Sequence[int | None], a: int, b: int,
             first: int = 0, until: int | None = None) -> list[Phrase]:
        """ITN phrases of ``words[a:b]``; one that is not whole does not span a comma."""
        assert self.normalizer is not None
        if b <= a or b <= first or (until is not None and a >= until):
            return []
        if not waiting_allowed() and not getattr(self.normalizer, "answers_at_once", False):
            raise WouldWait(" ".join(words[a:b]))
        out = []
        upto = None if until is None else until - a
        for p in _shifted(self.normalizer.phrases(words[a:b], first=max(0, first - a), until=upto), a):
            if p.whole or all(labels[k] != COMMA for k in range(p.start, p.end - 1)):
                out.append(p)
            else:
                out += [q for c, d in _runs(labels[p.start:p.end], (COMMA,))
                        for q in _shifted(self.normalizer.phrases(words[p.start + c:p.start + d]), p.start + c)]
        return out

    def render(self, words: Sequence[str], labels: Sequence[int], cases: Sequence[int | None] = (),
               *, sentence_start: bool, phrases: Sequence[Phrase] | None = None,
               affixes: Sequence[Affix] = ()) -> str:
        """``words`` with their marks as text, each phrase in its written form.

        ``cases``: a truecasing head's classes (None or missing: the rules).
        ``affixes``: the input's symbols around each word (missing: none), written around
        it; around a phrase, those before its first word and after its last (``c++`` with
        the lexicon's ``c`` -> ``C`` is ``C++``), unless its form already has them there.
        ``phrases`` default to :meth:`phrases` of the words themselves.
        A phrase is written as its form says (no sentence capital is added);
        its last word's mark follows it, except a period after a form that
        already ends with one ("p.m.") or with "!" or "?" ("Yahoo!"), and a "?" after a "?".
        """
        if phrases is None:
            phrases = self.phrases(words, labels)
        learned = list(cases) + [None] * (len(words) - len(cases))
        has_case = any(c is not None for c in learned)
        shown: list[str] = []
        marks: list[int] = []
        kinds: list[int] = []
        verbatim: list[bool] = []
        shown_affixes: list[Affix] = []
        i = 0
        for p in [*(q for q in phrases if q.text), Phrase(len(words), len(words), "")]:
            for k in range(i, p.start):
                shown.append(words[k])
                marks.append(labels[k])
                kinds.append(LOWER if learned[k] is None else learned[k])
                verbatim.append(False)
                shown_affixes.append(affixes[k] if k < len(affixes) else NO_AFFIX)
            if p.end > p.start:
                last = labels[p.end - 1]
                shown.append(p.text[:-1] if last == PERIOD and p.text.endswith(".") else p.text)
                marks.append(last)
                kinds.append(LOWER)
                verbatim.append(True)
                shown_affixes.append(_form_affix(p.text, affixes[p.start] if p.start < len(affixes) else NO_AFFIX,
                                                 affixes[p.end - 1] if p.end - 1 < len(affixes) else NO_AFFIX))
            i = p.end
        return render(shown, marks, capitalize=self.capitalize, sentence_start=sentence_start,
                      cases=kinds if has_case else None, verbatim=verbatim,
                      affixes=shown_affixes if any(a != NO_AFFIX for a in shown_affixes) else None)


def _form_affix(form: str, first: Affix, last: Affix) -> Affix:
    """The input's symbols written around a phrase's form: those before its first word and
    after its last, each side unless the form already shows it there ("$" before "$25"). An
    abbreviation's final dot ("u.s." -> "United States") belongs to the spoken form: it goes, and
    so does a plural possessive's apostrophe where the form does not end with an ``s``
    ("two dollars' worth" -> "$2 worth")."""
    before, after = first[0], last[1].removesuffix(".")
    if after.startswith("'") and form[-1:] not in ("s", "S"):
        after = after[1:]
    before = "" if form.startswith(before) else before
    after = "" if form.endswith(after) else after
    return (before, after) if before or after else NO_AFFIX


@dataclass(frozen=True)
class _Held:
    word: str
    label: int
    case: int | None
    affix: Affix = NO_AFFIX
    # written, a word of a written form but its first (the left context never starts inside
    # one: read from a word inside, "bull" "red bull" of "RBRB", the words after it would be
    # matched as the form's rest, not as a phrase of their own); not known in a resume's context
    inside: bool = False


class FinalTexts:
    """The ``text`` of a stream's finals and partials, written forms kept whole.

    The rule (``docs/protocol.md``, "Written forms across finals"): a final
    writes its words, and the words an earlier final held back, up to the
    first phrase that goes on into its right context (the words received and
    not final yet, as they are at that moment); the words of that phrase are
    *held*: the final that finalizes the phrase's last word writes the whole
    phrase. So are the words from one of its own on when they and the right
    context begin a longer lexicon phrase (which later words may complete).
    Nothing is delayed: every final is sent when the contract says, with its
    ``words`` and ``p``; only where its words appear in ``text`` moves. A
    final with no right context (a flush, the end, a delay deadline with
    nothing after it) holds nothing. A partial writes the held words,
    then its own. Phrases are found with the last ``LEFT_CONTEXT_WORDS``
    words already written as left context, unless a phrase would reach back
    into them (then without it).
    """

    def __init__(self, formatter: Formatter) -> None:
        self.formatter = formatter
        self._held: list[_Held] = []
        self._held_sentence_start = True
        self._written: list[_Held] = []  # the last words written, left context
        # (words, text) of the form the written text ends with, when all its words are in
        # _written: the next words may go on with it (_continued)
        self._last_form: tuple[int, str] | None = None
        self._seeded = False  # a resume's context is to be read for a form it ends with (_read_seed)
        self._infer: list[_Held] | None = None  # a resume's context whose held words are to be inferred
        self._infer_right_context = 0

    def _phrases(self, words: Sequence[str], labels: Sequence[int | None], until: int | None = None) -> list[Phrase]:
        """The phrases of ``words`` (which follow the words written so far), found with
        those as left context; without it where a phrase would begin in it. ``until``:
        only phrases that begin before it are needed (the words after it are context)."""
        k = len(self._written)
        if k:
            ww, wl = [w.word for w in self._written], [w.label for w in self._written]
            found = self.formatter.phrases(ww + list(words), wl + list(labels),
                                           first=k, until=None if until is None else until + k)
            crossing = next((p for p in found if p.start < k < p.end), None)
            go_on = self._continued(ww, wl, words, labels, found if crossing else None)
            if go_on is None and crossing is not None:
                # the words go on with a form already written but not as its rest ("20", then
                # "five dollars": "$25"): written as spoken, not read alone ("$5")
                go_on = Phrase(0, crossing.end - k, "")
            out = [Phrase(p.start - k, p.end - k, p.text, p.whole) for p in found if p.start >= k]
            return out if go_on is None else [go_on, *(p for p in out if p.start >= go_on.end)]
        return self.formatter.phrases(words, labels, until=until)

    def _continued(self, ww: list[str], wl: list[int | None], words: Sequence[str],
                   labels: Sequence[int | None], found: Sequence[Phrase] | None) -> Phrase | None:
        """The rest of a form that the written words ``ww`` ended with and ``words`` go on
        ("3:30" written, then "p m": "p.m.", so that the two texts read "3:30 p.m."), as a
        phrase of ``words``; None when they end with no form or the words do not go on
        with it. ``found``: the phrases of ``ww + words`` already searched (None: searched
        here, from the form's first word on)."""
        k = len(ww)
        if self._last_form is None or not words:
            return None
        size, form = self._last_form
        if found is None:
            found = self.formatter.phrases(ww + list(words), wl + list(labels), first=k - size)
        p = next((p for p in found if p.start == k - size and p.end > k), None)
        if p is None or not p.text.startswith(form + " "):
            return None
        return Phrase(0, p.end - k, p.text[len(form) + 1:], p.whole)

    def _number(self, words: Sequence[str]) -> bool:
        """Are ``words`` (one or more) all number words of the normalizer (its
        ``number_words``; none without ITN or such an attribute)?"""
        known = getattr(self.formatter.normalizer, "number_words", None) if self.formatter.normalizer else None
        return bool(words) and known is not None and all(
            w in known or ("-" in w and all(part in known for part in w.split("-"))) for w in words)

    def _ordinal(self, word: str) -> bool:
        """Is ``word`` an ordinal number word ("fourth", "twenty-first", "first")?"""
        return self._number([word]) and word.endswith(_ORDINAL_ENDINGS)

    def _month(self, word: str) -> bool:
        """Is ``word`` a month name of the normalizer (its ``month_words``; none without ITN or
        such an attribute)?"""
        known = getattr(self.formatter.normalizer, "month_words", None) if self.formatter.normalizer else None
        return known is not None and word in known

    def _open_date(self, span: Sequence[_Held], phrases: Sequence[Phrase]) -> Phrase | None:
        """A form the final's words begin at their end that a number after them may complete:
        a month name or another word a number phrase opens with (the normalizer's
        ``opener_words``: "on march" before "fifth", "a" before "hundred billion", "by point"
        before "five"), with no mark; "half" or "quarter" and "past" or "to" ("quarter to" before
        "nine"); or a month and its day with the comma a written date puts
        there ("march fifth," before "two thousand twenty": "March 5, 2020")."""
        n = len(span)
        last = span[-1]
        openers = getattr(self.formatter.normalizer, "opener_words", None) if self.formatter.normalizer else None
        if self._month(last.word) and last.label not in (PERIOD, QUESTION):  # "april," before "twenty fifth"
            return Phrase(n - 1, n, "")
        if openers is not None and last.word in openers and last.label not in (COMMA, PERIOD, QUESTION):
            return Phrase(n - 1, n, "")
        if last.word in _TIME_LINKS and last.label not in (COMMA, PERIOD, QUESTION) and n > 1 and \
                span[-2].word in _HOUR_FRACTIONS and span[-2].label not in (COMMA, PERIOD, QUESTION):
            return Phrase(n - 2, n, "")  # "quarter to" before "nine"
        if last.label == COMMA and self._number([last.word]):
            ending = next((p for p in phrases if p.end == n and p.text), None)
            if ending is not None and self._month(span[ending.start].word):
                return Phrase(ending.start, n, "")
        return None

    def _open_number(self, span: Sequence[_Held], phrases: Sequence[Phrase],
                     context: Sequence[str] = (), paused: bool = False) -> Phrase | None:
        """The number the final's words end with, unmarked, which later words may go on
        ("it costs twenty" before "five dollars", "one hundred" before "and five", "one
        hundred and", "seven p" before "m"): the phrase that ends with its last number word,
        or else the number words it ends with, through the last word; or a written form
        before "and", or money in whole units before a pause ("two dollars" before "and fifty
        cents": "$2.50")."""
        n = len(span)
        trailing = 1 if n > 1 and (span[-1].word in _GOES_ON + _TIME_LETTERS + _TIME_LINKS or (
            span[-1].word == _DATE_LINK and self._ordinal(span[-2].word))) else 0  # "one hundred and", "the fourth of"
        last = n - trailing
        # A comma does not end a number: the model puts them between digits and inside numbers
        # ("five, five, five, one two...", "one thousand, two hundred") when it sees little
        # after them; held across them, the words are written as offline writes them (one
        # form, its commas not shown, or several forms with their commas).
        if not last or any(h.label in (PERIOD, QUESTION) for h in span[last - 1:]) or \
                (trailing and span[last - 1].label == COMMA):
            return None
        if not self._number([span[last - 1].word]):
            before_and = (span[-1].word if trailing else context[:1] and context[0]) == "and"
            form = next((p for p in phrases if p.end == last and p.text), None)  # "$2" before "and"
            if form is None and before_and:  # the words after it may hide it from the grammars
                form = self._form_before(span, last)
            if form is None:
                return None
            whole_units = paused and not trailing and form.text[:1] in _CURRENCY and "." not in form.text
            return Phrase(form.start, n, "") if before_and or whole_units else None
        s = last - 1
        while s > 0 and (self._number([span[s - 1].word]) or span[s - 1].word in _GOES_ON) and \
                span[s - 1].label not in (PERIOD, QUESTION):
            s -= 1
        if 0 < s < last and span[s].word == "and" and span[s - 1].label not in (PERIOD, QUESTION) and (
                (money := self._form_before(span, s)) is not None and money.text[:1] in _CURRENCY):
            s = money.start  # "one hundred dollars and forty" (cents may follow): held from "one"
        if (span[-1].word if trailing else context[:1] and context[0]) == _DATE_LINK and s > 0 and \
                span[s - 1].word == "the" and span[s - 1].label == O:
            s -= 1  # "the fourth of" (july): the date's reading takes the "the" too ("July 4")
        ending = next((p for p in phrases if p.end == last), None)
        return Phrase(s if ending is None else min(s, ending.start), n, "")

    def _form_before(self, span: Sequence[_Held], end: int) -> Phrase | None:
        """The written form that ``span[:end]`` ends with, read without the words after it (which
        may hide it: "one hundred dollars and forty" has no reading until "cents" comes)."""
        words = [h.word for h in span[:end]]
        return next((p for p in self._phrases(words, [h.label for h in span[:end]]) if p.end == end and p.text),
                    None)

    def _open_lexicon_phrase(self, span: Sequence[_Held], all_words: Sequence[str]) -> Phrase | None:
        """A lexicon phrase that the words after the final's may still complete: the words
        from one of the final's own (with no mark from there to its last) through the last
        word received begin a longer entry ("the united states of" before "america")."""
        lexicon = self.formatter.lexicon
        if not lexicon:
            return None
        s = lexicon.open_prefix(all_words)
        n = len(span)
        if s is None or s >= n or any(h.label in (COMMA, PERIOD, QUESTION) for h in span[s:]):
            return None
        return Phrase(s, len(all_words), "")

    def seed(self, words: Sequence[str], labels: Sequence[int], *, held: int | None = 0,
             right_context: int = 0) -> None:
        """Take ``words`` (with their ``labels``), final before this stream's first final
        elsewhere (a resume's context): the last ``held`` of them no final wrote, and are held
        here (the next final or flush writes them first); the others were written, left
        context, never written again; a form they end with ("three thirty": "3:30") is one the
        next words may go on with ("p m": "p.m."), as on an unbroken stream (read by the first
        text written, where the grammars may be searched: :meth:`_read_seed`).

        ``held`` None (a client that does not pass the last final's ``held`` on): the first
        text written infers it from the ``right_context`` (the session's) words that follow
        the context (:meth:`_inferred_held`): the words a final would have held for a phrase
        that those words go on with."""
        given = [_Held(w, label, None) for w, label in zip(words, labels, strict=True)]
        self._infer = given[-INFER_REPLAY_WORDS - LEFT_CONTEXT_WORDS:] if held is None else None
        self._infer_right_context = right_context
        cut = len(given) - max(0, min(held or 0, len(given), MAX_HELD_WORDS))
        self._written = given[:cut][-LEFT_CONTEXT_WORDS:]
        self._held = given[cut:]
        self._held_sentence_start = not self._written or self._written[-1].label in (PERIOD, QUESTION)
        self._last_form = None
        self._seeded = bool(self._written)

    def _inferred_held(self, given: list[_Held], following: Sequence[str]) -> int:
        """How many of a resume's last context words (``given``) the old connection's finals left
        held, as far as the words that follow them (``following``: received since, final or
        not) tell: the context's last words replayed one final a word, each with the next
        ``right_context`` words (:meth:`seed`) as its right context (none: a final at a pause,
        as at right context 0). Exact for a stream of one word a message decided by its right
        context; a final that held words at a pause for words that did not come, or whose words
        a flush wrote, cannot be told from one that wrote them."""
        if not given:
            return 0
        r = self._infer_right_context
        probe = FinalTexts(self.formatter)
        t = min(len(given), INFER_REPLAY_WORDS)
        before, tail = given[:-t], given[-t:]
        probe.seed([h.word for h in before], [h.label for h in before])
        rest = [h.word for h in tail] + list(following)
        sentence_start = not before or before[-1].label in (PERIOD, QUESTION)
        for i, h in enumerate(tail):
            context = rest[i + 1:i + 1 + r]
            probe.final([h.word], [h.label], [], sentence_start=sentence_start, context=context, paused=not context)
            sentence_start = h.label in (PERIOD, QUESTION)
        return probe.held

    def _read_seed(self, following: Sequence[str] = (), *, ending: bool = False) -> None:
        """The form a resume's context ends with (:meth:`seed`), once; with ``held`` to infer,
        the words held (``following``: the words after the context known now; ``ending``: a
        flush or the end writes what is held, and no word may follow)."""
        if self._infer is not None:
            if not following and not ending:  # no word after the context yet: nothing to tell them by
                return
            given = self._infer
            k = self._inferred_held(given, following)
            self._infer = None  # (after the search: one that must wait is run again)
            if k:
                self._written = given[:-k][-LEFT_CONTEXT_WORDS:]
                self._held = given[-k:]
                self._held_sentence_start = not self._written or self._written[-1].label in (PERIOD, QUESTION)
                self._seeded = bool(self._written)
        if not self._seeded:
            return
        words, labels = [h.word for h in self._written], [h.label for h in self._written]
        ending = next((p for p in self.formatter.phrases(words, labels) if p.end == len(words) and p.text), None)
        self._last_form = None if ending is None else (len(words) - ending.start, ending.text)
        self._seeded = False  # (after the search: one that must wait is run again)

    @property
    def held(self) -> int:
        """Final words whose text no final has carried yet."""
        return len(self._held)

    @property
    def held_or_unknown(self) -> int | None:
        """:attr:`held`, or None while a resume's held words are still to be inferred (a new
        :class:`FinalTexts` for new options is seeded with it)."""
        return None if self._infer is not None else len(self._held)

    def read_seed_at_end(self) -> None:
        """A flush or the end with no word after a resume's context: the words it held are
        inferred now (:meth:`seed`), so that :attr:`held` counts them."""
        self._read_seed(ending=True)

    def final(self, words: Sequence[str], labels: Sequence[int], cases: Sequence[int | None],
              *, sentence_start: bool, context: Sequence[str], paused: bool = False,
              affixes: Sequence[Affix] = ()) -> str:
        """The ``text`` of a final of ``words``; ``sentence_start``: the first of them opens a
        sentence; ``context``: the words received after them and not final; ``paused``: its
        last word was decided by a delay deadline with no word after it yet (not a flush or
        the end), so that a form the grammars read as unfinished there is held. ``affixes``:
        the input's symbols around each of ``words`` (:meth:`Formatter.render`)."""
        self._read_seed([*words, *context], ending=not words and not context)
        if not self._held:
            self._held_sentence_start = sentence_start
        n_new = len(words)
        span = self._held + [_Held(w, label, c, a) for w, label, c, a in zip(
            words, labels, list(cases) + [None] * (n_new - len(cases)),
            list(affixes) + [NO_AFFIX] * (n_new - len(affixes)), strict=True)]
        n = len(span)
        all_words = [h.word for h in span] + list(context)
        phrases = self._phrases(all_words, [h.label for h in span] + [None] * len(context), until=n)
        cut = n
        crossing = next((p for p in phrases if p.start < n < p.end), None)
        if crossing is None and "and" in context[1:]:
            # the words after an "and" in the context may hide a form that the final's words begin
            # ("one hundred and ninety six" | "dollars and forty", no reading until "cents"): read
            # the context up to it too
            near = all_words[:n + context.index("and", 1)]
            found = self._phrases(near, [h.label for h in span] + [None] * (len(near) - n), until=n)
            if (crossed := next((p for p in found if p.start < n < p.end), None)) is not None:
                phrases, crossing = found, crossed
        if context or paused:
            # a longer entry begun before it wins: with "united states" in the lexicon too, "the
            # united states" before "of" is held from "the" (for "the united states of america")
            opened = self._open_lexicon_phrase(span, all_words)
            if opened is not None and (crossing is None or opened.start < crossing.start):
                crossing = opened
        if crossing is None and paused:  # "three thirty p" before a pause: "m" may follow
            crossing = next((p for p in phrases if p.end == n and not p.text), None)
        if crossing is None and (paused or context[:1] and context[0] in _GOES_ON + _TIME_LETTERS + _TIME_LINKS
                                 or self._number(context[:1])
                                 or span and context[:1] and context[0] == _DATE_LINK and self._ordinal(span[-1].word)):
            crossing = self._open_number(span, phrases, context, paused)  # "twenty" before a pause or "and"
        if crossing is None and (paused or self._number(context[:1]) or context[:1] and context[0] in _TIME_LINKS):
            crossing = self._open_date(span, phrases)  # "march" or "march fifth," before a pause or a number
        elif crossing is not None and 0 < crossing.start < n and self._number([span[crossing.start].word]):
            date = self._open_date(span[:crossing.start], phrases)  # "march fifth," before "two thousand"
            if date is not None:
                crossing = Phrase(date.start, crossing.end, "")
        while crossing is not None and (inside := next(
                (p for p in phrases if p.start < crossing.start < p.end), None)) is not None:
            # held from inside a form ("five two" of "one dollar five two": "$1.05"): from its start
            crossing = Phrase(inside.start, crossing.end, "")
        if crossing is not None and 0 < crossing.start < n and (self._number([span[crossing.start].word]) or (
                span[crossing.start].word in _GOES_ON + _TIME_LETTERS + _TIME_LINKS
                and self._number([span[crossing.start - 1].word]))):
            # a comma does not end a number ("three hundred, six dollars" goes on as "$306"), and a
            # lexicon phrase held from a word that goes on with one ("five" + "a" of "a b c") may
            # turn out to be its rest ("a m": "5 a.m."): the number words before the held ones are
            # held with them, unless a sentence ends there
            s = crossing.start
            while s > 0 and span[s - 1].label not in (PERIOD, QUESTION) and (self._number([span[s - 1].word]) or (
                    span[s - 1].word in _GOES_ON and s > 1 and self._number([span[s - 2].word]))):
                s -= 1
            while crossing is not None and s < crossing.start and (inside := next(
                    (p for p in phrases if p.start < s < p.end), None)) is not None:
                s = inside.start
            crossing = Phrase(s, crossing.end, "")
        if crossing is not None and n - crossing.start <= MAX_HELD_WORDS:
            cut = crossing.start
        elif crossing is not None:  # too long to hold: written as far as it goes now
            phrases = self._phrases(all_words[:n], [h.label for h in span])
        text = self.formatter.render(
            [h.word for h in span[:cut]], [h.label for h in span[:cut]], [h.case for h in span[:cut]],
            sentence_start=self._held_sentence_start, phrases=[p for p in phrases if p.end <= cut],
            affixes=[h.affix for h in span[:cut]],
        )
        if 0 < cut:
            self._held_sentence_start = span[cut - 1].label in (PERIOD, QUESTION)
            ending = next((p for p in phrases if p.end == cut and p.text), None)
            self._last_form = (None if ending is None or cut - ending.start > LEFT_CONTEXT_WORDS
                               else (cut - ending.start, ending.text))
        inside = {k for p in phrases if p.text and p.end <= cut for k in range(p.start + 1, p.end)}
        written = self._written + [replace(h, inside=True) if k in inside else h for k, h in enumerate(span[:cut])]
        start = max(0, len(written) - LEFT_CONTEXT_WORDS)
        while start > 0 and written[start].inside and len(written) - start < MAX_HELD_WORDS:
            start -= 1  # from the first word of the form the last words are in
        self._written = written[start:]
        self._held = span[cut:]
        return text

    def partial(self, words: Sequence[str], labels: Sequence[int], cases: Sequence[int | None],
                *, sentence_start: bool, follows_finals: bool = True, affixes: Sequence[Affix] = ()) -> str:
        """The ``text`` of a partial: the held words (when the partial's words follow the
        last final word: ``follows_finals``), then ``words`` (provisional and hypothesis),
        with ``affixes`` around them (:meth:`Formatter.render`)."""
        self._read_seed()  # (held words are inferred from words sent, not from a partial's)
        held = self._held if follows_finals else []
        learned = list(cases) + [None] * (len(words) - len(cases))
        all_words, all_labels = [h.word for h in held] + list(words), [h.label for h in held] + list(labels)
        return self.formatter.render(
            all_words, all_labels, [h.case for h in held] + learned,
            sentence_start=self._held_sentence_start if held else sentence_start,
            phrases=self._phrases(all_words, all_labels) if follows_finals else None,
            affixes=[h.affix for h in held] + list(affixes),
        )


#: Why a server with no grammars loaded does not write ``itn`` (its sessions' ``itn`` is off).
ITN_UNAVAILABLE = ("itn is not available on this server: it needs the 'itn' extra "
                   "(pip install -e '.[itn]' in the server's checkout) and a server started with its grammars "
                   "(serve --itn-grammars on)")


@dataclass(frozen=True)
class WrittenForms:
    """What every session of a server shares for written forms (read-only).

    Attributes:
        lexicon: the server's lexicon (``serve --lexicon``), under each session's pairs.
        normalizer: the ITN grammars, loaded at startup (None: ``itn`` is not served: a session
            that asks for it gets it off, as a server of plain version 1 ignores it).
    """

    lexicon: Lexicon = Lexicon()
    normalizer: Normalizer | None = None

    @property
    def itn_available(self) -> bool:
        """Whether sessions may have ``itn`` (the grammars are loaded)."""
        return self.normalizer is not None

    def formatter(self, *, itn: bool, lexicon: Sequence[tuple[str, str]], capitalize: bool) -> Formatter:
        """A session's formatter for its options (``lexicon``: its own pairs)."""
        return Formatter(Lexicon(lexicon, base=self.lexicon) if lexicon else self.lexicon,
                         self.normalizer if itn else None, capitalize)


def parse_lexicon_tsv(text: str, *, source: str = "lexicon") -> tuple[tuple[str, str], ...]:
    """A lexicon file's pairs: one ``spoken<TAB>written`` pair a line; blank lines and lines
    starting with ``#`` are skipped. Raises ``ValueError`` naming the line."""
    pairs = []
    lines: dict[str, int] = {}  # spoken phrase -> its line
    for number, line in enumerate(split_lines(text), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise ValueError(f"{source}:{number}: expected 'spoken<TAB>written', got {line!r}")
        try:
            (pair,) = normalize_lexicon([fields])
        except ValueError as e:
            raise ValueError(f"{source}:{number}: {str(e).removeprefix('lexicon[0]: ')}") from None
        if pair[0] in lines:
            raise ValueError(f"{source}:{number}: the spoken phrase {pair[0]!r} is already on line {lines[pair[0]]}")
        lines[pair[0]] = number
        pairs.append(pair)
    return tuple(pairs)
