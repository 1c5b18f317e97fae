"""Inverse text normalization (ITN) with NeMo's English WFST grammars (the optional ``itn`` extra).

``pip install -e '.[itn]'`` (in the checkout) installs ``nemo-text-processing`` and
``pynini``. :func:`load_normalizer` compiles the grammars once into a cache
folder (about half a minute) and loads them from there afterwards (a few
seconds); the server loads them at startup, never per session.

:class:`NemoNormalizer` is a :class:`streampunct.text.written_form.Normalizer`:
for a run of lowercase words with no mark inside it returns the phrases the
grammars write as numbers, ordinals, decimals, percentages, money, measures,
years, dates, times and phone numbers, aligned to the words (other classes
the grammars know, such as URLs and their abbreviation list, are left
spoken). It asks the grammars only about stretches around a number word
(every one of those classes has one), so text without numbers costs a set
lookup per word.

The grammars hold Python's GIL while they run (one search of a number
phrase is a single call of 30-50 ms), so a thread of the server running them
would still stall its event loop: :class:`ProcessNormalizer` runs them in
worker processes (``serve --itn-workers``), and the server writes the texts
of ``itn`` sessions on threads that wait for those processes.

The grammars decide what is a number and its digits; a short house style
then writes their output as the AP Stylebook and the Chicago Manual of Style
do (``docs/protocol.md``, "Written forms"): "3:30 p.m." not "03:30 p.m.",
"7 p.m.", "March 5, 2020", "25,000", "5%", "50 cents", "0.5", "555-1234",
units as spoken ("10 kilometers"), and first to ninth as words.
"""

from __future__ import annotations

import concurrent.futures
import functools
import importlib.util
import logging
import multiprocessing
import multiprocessing.connection
import os
import re
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from streampunct.errors import DependencyError, InputError
from streampunct.text.written_form import Phrase, WouldWait, waiting_allowed

logger = logging.getLogger(__name__)

_INSTALL = "inverse text normalization needs the 'itn' extra: pip install -e '.[itn]' in the streampunct checkout"

#: Grammar classes written; the rest (``electronic``, ``whitelist`` names) stay spoken.
WRITTEN_CLASSES = frozenset({"cardinal", "ordinal", "decimal", "fraction", "money", "measure", "date", "time",
                             "telephone"})

_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen eighteen nineteen").split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = "hundred thousand million billion trillion".split()
_IRREGULAR_ORDINALS = {"one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth",
                       "nine": "ninth", "twelve": "twelfth"}


def _ordinal(word: str) -> str:
    if word in _IRREGULAR_ORDINALS:
        return _IRREGULAR_ORDINALS[word]
    return word[:-1] + "ieth" if word.endswith("y") else word + "th"


#: The words one of which every written phrase contains (cardinals and ordinals):
#: stretches without them are not sent to the grammars.
NUMBER_WORDS = frozenset(_UNITS + _TENS + _SCALES + [_ordinal(w) for w in _UNITS[1:] + _TENS + _SCALES])
#: Words around a number word that the grammars see ("on march fifth", "ten kilometers per hour").
CONTEXT_WORDS = 3
#: Longest stretch searched as one: a search's time and memory grow faster than its length
#: (24 words 38 ms, 192 words 0.64 s and 80 MB), and no written phrase is that long; a longer
#: run of number words is searched in pieces of at most this many.
MAX_STRETCH_WORDS = 40

_MONTHS = ("january february march april may june july august september october november "
           "december").split()
MONTHS = frozenset(_MONTHS)
#: The words other than number words that a written phrase can begin with ("march fifth",
#: "the fifth of march", "half past two", "quarter past five", "point five percent", letters
#: spelled before digits): those the grammars began a phrase with on 2.9M words of TEDx
#: captions and SwDA, the months, and the prefixes their classes know (a superset is safe;
#: tests/streampunct/test_itn.py checks that every phrase begins with one).
OPENERS = frozenset(_MONTHS + list("abcdefghijklmnopqrstuvwxyz") + [
    "the", "an", "half", "quarter", "point", "minus", "negative", "plus", "oh", "double", "triple"])
#: The openers a stream holds at a final's end while a number word may follow ("a" before
#: "hundred billion", "point" before "five"): not the letters, which spell words too.
HELD_OPENERS = frozenset(["a", "an", "the", "half", "quarter", "point", "minus", "negative"])

#: Number words that the grammars write (with house_style) only beside a unit, currency, time or
#: date word: alone they stay words ("one of them", "the first"), the commonest case in
#: conversational text (docs/formatting.md).
SMALL_NUMBER_WORDS = frozenset(_UNITS[:10] + [_ordinal(w) for w in _UNITS[1:10]])

#: Words the grammars read beside a lone small number word besides their unit and currency
#: names (:func:`_companions`): time, date, decimal and fraction words.
_COMPANIONS = frozenset(_MONTHS + [
    "o'clock", "clock", "m", "am", "pm", "quarter", "quarters", "half", "halves",
    "point", "dot", "minus", "negative", "percent", "per", "cent", "cents", "q", "bc", "ad", "bce", "ce",
    "era", "c", "d", "e", "crore", "crores", "lakh", "lakhs"])


@functools.cache
def _companions() -> frozenset[str] | None:
    """Words a phrase of a lone small number word contains: :data:`_COMPANIONS` and the last
    word of each unit and currency name in the grammars' own data (``measurements.tsv``,
    ``currency.tsv``; read once); None when the grammars are not installed."""
    spec = importlib.util.find_spec("nemo_text_processing")
    if spec is None or spec.origin is None:
        return None
    data = Path(spec.origin).parent / "inverse_text_normalization" / "en" / "data"
    words = set(_COMPANIONS)
    for name in ("measurements.tsv", "currency.tsv"):
        for line in (data / name).read_text(encoding="utf-8").splitlines():
            spoken = line.split("\t")[-1].split()
            if spoken:
                words.add(spoken[-1].lower())
    return frozenset(words)


def _is_companion(word: str, companions: frozenset[str]) -> bool:
    """``word`` or a singular of it (the grammars read plurals of their units) is a companion."""
    if word in companions or word in ("feet", "teeth"):
        return True
    return any(word.endswith(end) and word[:-len(end)] + add in companions
               for end, add in (("s", ""), ("es", ""), ("ies", "y"), ("ves", "f")))


_HOUR = re.compile(r"^0(\d)(?=:)")
_DIGITS = re.compile(r"(?<![\d.])\d{4,}")
_SMALL_ORDINAL = re.compile(r"^[1-9](st|nd|rd|th)$")
#: Units of time: zero to nine of them are spelled out ("nine hours", AP and Chicago), while
#: dimensions, weights and speeds take figures ("5 feet", "7.2 pounds").
_DURATIONS = frozenset("second seconds minute minutes hour hours day days night nights week weeks "
                       "month months year years decade decades century centuries".split())


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/streampunct/itn`` (``~/.cache/streampunct/itn``)."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "streampunct" / "itn"


def available() -> bool:
    """Is the ``itn`` extra installed?"""
    return all(importlib.util.find_spec(m) is not None for m in ("pynini", "nemo_text_processing"))


def grammar_cache(cache_dir: Path | None = None, *, option: str = "--itn-cache") -> Path:
    """The folder the compiled grammars go in, made if need be (``cache_dir``: the user's
    ``--itn-cache``, else :func:`default_cache_dir`); an :class:`InputError` naming the option
    (``option``: the API's ``itn_cache``) when it cannot be made there (a file, no permission),
    before any worker starts."""
    from importlib.metadata import version

    folder = (cache_dir or default_cache_dir()) / f"nemo-text-processing-{version('nemo-text-processing')}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        where = f"{option} {cache_dir}" if cache_dir is not None else f"the ITN grammar cache {folder}"
        raise InputError(f"{where}: cannot make the folder for the compiled grammars there "
                         f"({e.strerror or e})") from None
    return folder


def load_normalizer(cache_dir: Path | None = None, *, option: str = "--itn-cache") -> NemoNormalizer:
    """NeMo's English ITN grammars, compiled into ``cache_dir`` once (default:
    :func:`default_cache_dir`); raises :class:`DependencyError` without the extra."""
    try:
        import pynini  # noqa: F401
        from nemo_text_processing.inverse_text_normalization.inverse_normalize import (
            InverseNormalizer,
        )
    except ImportError as e:
        raise DependencyError(f"{_INSTALL} ({e})") from e
    folder = grammar_cache(cache_dir, option=option)
    logging.getLogger("NeMo-text-processing").setLevel(logging.WARNING)
    return NemoNormalizer(InverseNormalizer(lang="en", input_case="lower_cased", cache_dir=str(folder)))


class _CacheInfo:
    def __init__(self, currsize: int, maxsize: int) -> None:
        self.currsize, self.maxsize = currsize, maxsize


class _StretchCache:
    """An LRU cache of a stretch's phrases that can be asked whether it holds an answer
    (:func:`functools.lru_cache` cannot): inside
    :func:`~streampunct.text.written_form.without_waiting` a stretch it does not hold raises
    :class:`~streampunct.text.written_form.WouldWait` instead of running ``compute``."""

    def __init__(self, compute: Callable[[tuple[str, ...]], tuple[Phrase, ...]], maxsize: int, *,
                 submit: Callable[[tuple[str, ...]], concurrent.futures.Future] | None = None) -> None:
        self._compute = compute
        self._submit = submit  # the search as a future (a worker process), for WouldWait.fetch
        self._maxsize = maxsize
        self._lock = threading.Lock()
        self._answers: OrderedDict[tuple[str, ...], tuple[Phrase, ...]] = OrderedDict()
        self._searching: dict[tuple[str, ...], concurrent.futures.Future] = {}

    def __call__(self, words: tuple[str, ...]) -> tuple[Phrase, ...]:
        with self._lock:
            found = self._answers.get(words)
            if found is not None:
                self._answers.move_to_end(words)
                return found
        if not waiting_allowed():
            raise WouldWait(" ".join(words), None if self._submit is None else lambda: self.fetch(words))
        found = self._compute(words)
        self._store(words, found)
        return found

    def _store(self, words: tuple[str, ...], found: tuple[Phrase, ...]) -> None:
        with self._lock:
            self._answers[words] = found
            while len(self._answers) > self._maxsize:
                self._answers.popitem(last=False)

    def fetch(self, words: tuple[str, ...]) -> concurrent.futures.Future:
        """The search of ``words`` started with ``submit`` (one at a time per stretch: callers
        asking while it runs share it); its answer is cached when it is done."""
        assert self._submit is not None
        with self._lock:
            if words in self._answers:
                done: concurrent.futures.Future = concurrent.futures.Future()
                done.set_result(self._answers[words])
                return done
            future = self._searching.get(words)
            if future is not None:
                return future
            future = self._submit(words)
            self._searching[words] = future

        def finished(f: concurrent.futures.Future) -> None:
            with self._lock:
                self._searching.pop(words, None)
            if not f.cancelled() and f.exception() is None:
                self._store(words, f.result())

        future.add_done_callback(finished)
        return future

    def cache_info(self) -> _CacheInfo:
        return _CacheInfo(len(self._answers), self._maxsize)


class NemoNormalizer:
    """A :class:`~streampunct.text.written_form.Normalizer` over NeMo's ``InverseNormalizer``.

    Thread-safe (one lock around the grammars); answers are cached per stretch of words.
    Honours :func:`~streampunct.text.written_form.without_waiting` (``answers_at_once``).
    """

    answers_at_once = True
    #: The words a written number can end with (:class:`~streampunct.text.written_form.FinalTexts`
    #: holds them at a final's end while later words may go on with them).
    number_words = NUMBER_WORDS
    #: The month names, which begin a date that later words may go on with (held likewise).
    month_words = MONTHS
    #: Other words a number phrase begins with, held likewise while a number word may follow.
    opener_words = HELD_OPENERS

    def __init__(self, inverse_normalizer: Any, *, cache_size: int = 4096) -> None:
        self._inv = inverse_normalizer
        self._lock = threading.Lock()
        self._stretch = _StretchCache(self._stretch_phrases, cache_size)

    def phrases(self, words: Sequence[str], *, first: int = 0, until: int | None = None) -> list[Phrase]:
        out: list[Phrase] = []
        for a, b in _stretches(words, first, until):
            out += [Phrase(p.start + a, p.end + a, p.text, p.whole) for p in self._stretch(tuple(words[a:b]))]
        return out

    def _stretch_phrases(self, words: tuple[str, ...]) -> tuple[Phrase, ...]:
        # Hyphenated number words ("twenty-five") are split for the grammars; a phrase
        # must then begin and end on whole words.
        parts: list[str] = []
        owner: list[int] = []
        for i, word in enumerate(words):
            pieces = word.split("-") if "-" in word else [word]
            if len(pieces) > 1 and not all(p in NUMBER_WORDS for p in pieces):
                pieces = [word]
            parts += pieces
            owner += [i] * len(pieces)
        # The grammars read "one hundred" but not "a hundred": "a" before hundred or thousand is read
        # as one ("a hundred billion" -> 100 billion); "a million" stays (idioms: "one in a million").
        parts = ["one" if w == "a" and k + 1 < len(parts) and parts[k + 1] in ("hundred", "thousand") else w
                 for k, w in enumerate(parts)]
        try:
            with self._lock:
                found = self._written(parts)
        except Exception:  # the grammars' own failures: the words stay spoken
            logger.debug("ITN failed on %r", " ".join(parts), exc_info=True)
            return ()
        out = []
        for a, b, text, whole in found:
            if (a == 0 or owner[a - 1] != owner[a]) and (b == len(parts) or owner[b] != owner[b - 1]):
                out.append(Phrase(owner[a], owner[b - 1] + 1, text, whole))
        return tuple(out)

    def _written(self, words: list[str]) -> list[tuple[int, int, str, bool]]:
        """(start, end, written, whole) for the words the grammars write, in the house style;
        ``whole``: one grammar token (one number, date...) made of all of them."""
        import pynini

        inv = self._inv
        tagged = inv.select_tag(inv.find_tags(pynini.escape(" ".join(words))))
        inv.parser(tagged)
        parsed = inv.parser.parse()
        tokens = [next(iter(t["tokens"].items())) for t in parsed]
        out = []
        for a, b, c, d in _class_runs(words, tokens):
            if not all(tokens[k][0] in WRITTEN_CLASSES for k in range(c, d)):
                continue
            spoken = _token_words(words[a:b], d - c)
            if spoken is None and any(tokens[k][0] == "measure" for k in range(c, d)):
                continue  # "five foot five inches": each unit as spoken, or the words stay spoken
            cut, spoken = spoken is not None, spoken or [words[a:b]] * (d - c)
            before = words[a - 1] if a > 0 else None
            if tokens[c][0] == "time" and words[a] == "quarter" and before == "a":
                continue  # "a quarter past four": the grammars leave "a" out, so it stays spoken
            forms = [self._verbalize(inv, parsed[k], tokens[k][0], spoken[k - c], before if k == c else None)
                     for k in range(c, d)]
            counted = [_one_by_one(spoken[k - c]) if f is None and _counted(tokens[k][0], spoken[k - c]) else f
                       for k, f in zip(range(c, d), forms, strict=True)]
            if all(f is not None for f in forms):  # "": read, but left spoken (held together)
                out.append((a, b, " ".join(forms) if all(forms) else "", d - c == 1))
            elif counted != forms and (all(counted) if cut else _one_by_one(words[a:b])):
                # not a phone number or a year ("nine ten eleven twelve", "eleven twelve"):
                # numbers said one after another, each written on its own (not one form)
                text = " ".join(f or "" for f in counted) if cut else _one_by_one(words[a:b])
                out.append((a, b, text or "", False))
            elif d - c > 1 and all(tokens[k][0] == "measure" for k in range(c, d)):
                # measures cut at their own units ("two hours | thirty minutes"): each its own
                # phrase, so that the one the style spells out leaves the others written
                at = a
                for part, form in zip(spoken, forms, strict=True):
                    if form:
                        out.append((at, at + len(part), form, True))
                    at += len(part)
        # The grammars leave zero to twelve as words; the house style (AP, Chicago) writes
        # numerals from 10 up, so ten, eleven and twelve outside a phrase are written here.
        covered = {k for a, b, _, _ in out for k in range(a, b)}
        out += [(k, k + 1, _TEN_TO_TWELVE[w], True) for k, w in enumerate(words)
                if w in _TEN_TO_TWELVE and k not in covered]
        # nor do they read "hundredth" alone; after "the" or a possessive it is an ordinal (100th),
        # after "a" or "one" a fraction ("a hundredth of a second"), left as spoken
        out += [(k, k + 1, _SCALE_ORDINALS[w], True) for k, w in enumerate(words)
                if w in _SCALE_ORDINALS and k not in covered and k > 0 and words[k - 1] in _ORDINAL_CUES]
        return _dollars_and_cents(sorted(out), words)

    @staticmethod
    def _verbalize(inv: Any, token: Any, cls: str, spoken: Sequence[str], before: str | None) -> str | None:
        import pynini

        for tagged in inv.generate_permutations([token]):
            lattice = inv.find_verbalizer(pynini.escape(tagged))
            if lattice.num_states() != 0:
                return house_style(cls, inv.select_verbalizer(lattice), spoken, before)
        return None


class ProcessNormalizer:
    """A :class:`~streampunct.text.written_form.Normalizer` whose grammars run in ``workers`` processes.

    Each worker loads :func:`load_normalizer` (from ``cache_dir``) once;
    :meth:`start` waits until all have. :meth:`phrases` blocks its thread
    (without the GIL) while a worker answers; a stretch of words without a
    number word never leaves this process, and answers are cached here per
    stretch, as :class:`NemoNormalizer` does. A worker that dies is replaced
    (the call that was on it leaves its words spoken); a worker that cannot
    load the grammars makes :meth:`start` raise. Honours
    :func:`~streampunct.text.written_form.without_waiting` (``answers_at_once``):
    the server's sessions write a text that needs no worker on the event loop.
    """

    answers_at_once = True
    number_words = NUMBER_WORDS
    month_words = MONTHS
    opener_words = HELD_OPENERS

    def __init__(self, cache_dir: Path | None = None, *, workers: int = 1, cache_size: int = 4096) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.workers = workers
        self._cache_dir = cache_dir
        self._lock = threading.Lock()
        self._pool = self._new_pool()
        self._stretch = _StretchCache(self._remote, cache_size, submit=self._submit)

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        # spawn: the server process runs threads (engines, executors) that fork would copy badly
        return concurrent.futures.ProcessPoolExecutor(
            self.workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_init, initargs=(self._cache_dir,),
        )

    def start(self) -> None:
        """Start the workers and wait until each has loaded the grammars (the first alone, so
        that a first start compiles them into the cache once); raises what loading raised."""
        _companions()  # read here, not on the event loop by the first final's stretches
        self._pool.submit(_worker_ready).result()
        # Submitted together, these find one idle worker and start the others.
        for future in [self._pool.submit(_worker_ready) for _ in range(self.workers - 1)]:
            future.result()

    def phrases(self, words: Sequence[str], *, first: int = 0, until: int | None = None) -> list[Phrase]:
        out: list[Phrase] = []
        for a, b in _stretches(words, first, until):
            try:
                found = self._stretch(tuple(words[a:b]))
            except (concurrent.futures.process.BrokenProcessPool, concurrent.futures.CancelledError):
                found = ()  # not cached: the words stay spoken this once
            out += [Phrase(p.start + a, p.end + a, p.text, p.whole) for p in found]
        return out

    def _submit(self, words: tuple[str, ...]) -> concurrent.futures.Future:
        return self._pool.submit(_worker_phrases, words)

    def _remote(self, words: tuple[str, ...]) -> tuple[Phrase, ...]:
        pool = self._pool
        try:
            return pool.submit(_worker_phrases, words).result()
        except concurrent.futures.process.BrokenProcessPool:
            logger.error("an ITN worker process died; starting new ones (%r left spoken)", " ".join(words))
            with self._lock:
                if self._pool is pool:
                    self._pool = self._new_pool()
            raise

    def close(self, timeout: float = 2.0) -> None:
        """Stop the workers (calls still waiting get no answer): each gets ``timeout`` seconds in
        all to exit, then is terminated. Left to the executor, an idle worker of a spawned
        process (``serve --workers``) could miss its stop and hold that process's exit."""
        pool = self._pool
        processes = list((pool._processes or {}).values())  # the executor names no other handle
        pool.shutdown(wait=False, cancel_futures=True)
        # Each process's sentinel is ready once it has exited, whoever reaps it (the executor's
        # own thread joins them too, so is_alive() after a join here may not know yet).
        running = {process.sentinel: process for process in processes}
        deadline = time.monotonic() + timeout
        while running and (left := deadline - time.monotonic()) > 0:
            for sentinel in multiprocessing.connection.wait(list(running), left):
                running.pop(sentinel)
        for process in running.values():
            process.kill()  # it ignores SIGTERM (_worker_init)
        if running:
            multiprocessing.connection.wait(list(running), 1.0)


#: The grammars of an ITN worker process (:class:`ProcessNormalizer`).
_WORKER: NemoNormalizer | None = None


def _worker_init(cache_dir: Path | None) -> None:
    global _WORKER
    # Ctrl-C in a terminal reaches the whole process group, and a service manager's stop
    # (systemd's KillMode=control-group) or a hangup every process of it: the server stops its
    # workers itself (ProcessNormalizer.close) once its sessions' texts are written, so a worker
    # must not die of them mid-call (the draining sessions' numbers would stay spoken)
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):
        signal.signal(getattr(signal, name), signal.SIG_IGN)
    parent = multiprocessing.parent_process()
    if parent is not None:  # a server killed outright (SIGKILL, OOM) leaves no worker behind
        threading.Thread(target=_exit_with, args=(parent.sentinel,), name="itn-parent-watch", daemon=True).start()
    _WORKER = load_normalizer(cache_dir)


def _exit_with(sentinel: int) -> None:
    """Exit this worker process when its parent's ``sentinel`` is ready: the parent is gone."""
    multiprocessing.connection.wait([sentinel])
    os._exit(0)


def _worker_ready() -> bool:
    return _WORKER is not None


def _worker_phrases(words: tuple[str, ...]) -> tuple[Phrase, ...]:
    assert _WORKER is not None
    return _WORKER._stretch(words)


def _is_number_word(word: str) -> bool:
    return word in NUMBER_WORDS or ("-" in word and any(p in NUMBER_WORDS for p in word.split("-")))


def _stretches(words: Sequence[str], first: int = 0, until: int | None = None) -> list[tuple[int, int]]:
    """Stretches of ``words`` around number words (``CONTEXT_WORDS`` on each side), merged.

    Only the phrases with a word in ``words[first:until]`` are needed
    (:meth:`~streampunct.text.written_form.Normalizer.phrases`): a number word before
    ``first`` starts no stretch (a stream's words already written would
    otherwise be searched again with each final), nor does one at ``until`` or
    later unless a phrase of it could begin before ``until``: a stretch it
    merges into, or a number word or :data:`OPENERS` word in its stretch before
    ``until`` (every written phrase begins with one of those).
    """
    out: list[list[int]] = []
    for i, word in enumerate(words):
        if i < first:
            continue
        if _is_number_word(word):
            a, b = max(0, i - CONTEXT_WORDS), min(len(words), i + CONTEXT_WORDS + 1)
            # the pronoun after a number ends its stretch: "three thirty p m i was" is read as
            # one unknown token where the model put no period after "m"
            b = next((k for k in range(i + 1, b) if words[k] == "i"), b)
            if (until is not None and i >= until and not (out and a <= out[-1][1])
                    and not any(_is_number_word(w) or w in OPENERS for w in words[a:until])):
                continue
            if out and a <= out[-1][1]:
                if b - out[-1][0] <= MAX_STRETCH_WORDS:
                    out[-1][1] = b
                elif b > out[-1][1]:  # too long to search as one: the rest is a stretch of its own
                    out.append([out[-1][1], b])
            else:
                out.append([a, b])
    companions = _companions()
    return [(a, b) for a, b in out if companions is None or not _lone_small(words[a:b], companions)]


def _lone_small(stretch: Sequence[str], companions: frozenset[str]) -> bool:
    """A stretch whose one number word is a small one with no unit, currency, time or date word
    beside it: the grammars write nothing there (:data:`SMALL_NUMBER_WORDS`)."""
    numbers = [w for w in stretch if _is_number_word(w)]
    return (len(numbers) == 1 and numbers[0] in SMALL_NUMBER_WORDS
            and not any(_is_companion(w, companions) for w in stretch))


def _class_runs(words: Sequence[str], tokens: Sequence[tuple[str, Any]]) -> list[tuple[int, int, int, int]]:
    """``(a, b, c, d)``: the words ``words[a:b]`` that the run of class tokens
    ``tokens[c:d]`` was read from.

    Plain words come back as ``name`` tokens, one word each; the runs of class tokens
    between them cover the words between those, one word or more a token. A run is
    returned only where every cover of the words puts it on the same words ("two
    thousand and twelve and", read as [2012, "and"]: the "and" is the last word, not
    the one in the number); a run of written classes begins with a number word or an
    :data:`OPENERS` word where a cover allows it. A name the grammars rewrote ("cat
    five" -> "CAT5") counts as a class token that is not written. No run when the
    tokens cover the words in no way (the words stay spoken).
    """
    plain = set(words)
    segments: list[tuple[int, int, tuple[str, ...] | None]] = []  # (c, d, a name's words or None)
    for k, (cls, body) in enumerate(tokens):
        name = tuple(str(body).split()) if cls == "name" else ()
        if name and all(w in plain for w in name):
            segments.append((k, k + 1, name))
        elif segments and segments[-1][2] is None:
            segments[-1] = (segments[-1][0], k + 1, None)
        else:
            segments.append((k, k + 1, None))
    written = [name is None and all(tokens[k][0] in WRITTEN_CLASSES for k in range(c, d))
               for c, d, name in segments]
    for strict in (True, False):
        def may_start(j: int, i: int, strict: bool = strict) -> bool:
            return not (strict and written[j]) or _is_number_word(words[i]) or words[i] in OPENERS
        bounds = _cover(words, segments, may_start)
        if bounds[0]:
            break
    else:
        return []
    return [(bounds[j][0], bounds[j + 1][0], c, d) for j, (c, d, name) in enumerate(segments)
            if name is None and len(bounds[j]) == 1 and len(bounds[j + 1]) == 1]


def _cover(words: Sequence[str], segments: Sequence[tuple[int, int, tuple[str, ...] | None]],
           may_start: Callable[[int, int], bool]) -> list[list[int]]:
    """For each boundary of ``segments``, the word positions it takes in some cover of
    ``words`` (all empty when there is none): a name covers its own words, a run of
    ``d - c`` class tokens that many words or more, beginning at a word ``i`` where
    ``may_start(segment, i)``."""
    n = len(words)
    forward = [{0}]
    for j, (c, d, name) in enumerate(segments):
        ends: set[int] = set()
        for i in forward[-1]:
            if name is None and i < n and may_start(j, i):
                ends.update(range(i + d - c, n + 1))
            elif name is not None and tuple(words[i:i + len(name)]) == name:
                ends.add(i + len(name))
        forward.append(ends)
    backward = [{n}]
    for j in range(len(segments) - 1, -1, -1):
        c, d, name = segments[j]
        starts: set[int] = set()
        for e in backward[0]:
            if name is None:
                starts.update(i for i in range(0, e - (d - c) + 1) if may_start(j, i))
            elif tuple(words[e - len(name):e]) == name:
                starts.add(e - len(name))
        backward.insert(0, starts)
    bounds = [sorted(f & b) for f, b in zip(forward, backward, strict=True)]
    return bounds if all(bounds) else [[] for _ in bounds]


def _token_words(spoken: Sequence[str], n: int) -> list[Sequence[str]] | None:
    """``spoken`` cut into the ``n`` grammar tokens it was written as: a token starts at a
    number word that follows other words ("five foot | five inches", "two hours | thirty
    minutes"); None when the cuts do not give ``n`` parts."""
    if n == 1:
        return [spoken]
    cuts = [i for i in range(1, len(spoken))
            if spoken[i] in NUMBER_WORDS and spoken[i - 1] not in _IN_A_NUMBER]
    if len(cuts) != n - 1:
        return None
    bounds = [0, *cuts, len(spoken)]
    return [spoken[bounds[k]:bounds[k + 1]] for k in range(n)]


#: Words inside one number: number words and what joins them ("two hundred and five", "five point two").
_IN_A_NUMBER = NUMBER_WORDS | frozenset(("and", "point", "a"))


def _grouped(match: re.Match) -> str:
    return f"{int(match.group(0)):,}"


_TEN_TO_TWELVE = {"ten": "10", "eleven": "11", "twelve": "12"}
_SCALE_ORDINALS = {"hundredth": "100th", "thousandth": "1,000th"}
_ORDINAL_CUES = frozenset("the his her their its our my your".split())

#: Words before a number that make a four-digit cardinal a year ("in 2012", "since 1999").
YEAR_CUES = frozenset("in since until till from of by year".split())

#: Words before "ten/eleven/twelve" and minutes that make them a clock time: the grammars read
#: "at three thirty" as 3:30 but "at twelve thirty" as the year 1230. A year cue that is
#: also here ("until", "by", "from") reads a time: years 1000-1259 are rarer in speech.
TIME_CUES = frozenset("at around before after until till by from".split())
_CLOCK_CARDINAL = re.compile(r"(1[0-2])([0-5]\d)")
#: The years the house style writes as years (a four-digit number outside them is not one).
_YEAR = re.compile(r"1[1-9]\d\d|20\d\d")
#: Years the grammars read from two number words ("nineteen ninety nine", "twenty twelve")
#: without a year cue before them: 1100-1299 said so ("eleven twelve", "twelve thirteen") is
#: mostly a count or a score, a year only after a cue ("in twelve thirty").
_SAID_YEAR = re.compile(r"1[3-9]\d\d|20\d\d")
#: The words of a phone number: one digit each (any count of them: a stream sees a phone
#: number's first digits before the rest, and holds them while they may go on).
DIGIT_WORDS = frozenset(_UNITS[:10] + ["oh"])


def house_style(cls: str, written: str, spoken: Sequence[str], before: str | None = None) -> str | None:
    """The grammars' output for one token, in the house style; None: leave the words spoken;
    "": leave them spoken but keep them one phrase (a stream holds them together while later
    words may still make them a written form: "seven forty five a", a serial, before "m").
    ``before``: the spoken word before the token, if any (a year cue keeps "2012" ungrouped)."""
    written = " ".join(written.split())
    clock = _CLOCK_CARDINAL.fullmatch(written)
    if (cls in ("date", "cardinal") and before in TIME_CUES and clock and len(spoken) > 1
            and spoken[0] in _TEN_TO_TWELVE and spoken[1] != "hundred"):
        return f"{clock.group(1)}:{clock.group(2)}"  # "at twelve thirty": 12:30
    if cls == "cardinal" and before in YEAR_CUES and _YEAR.fullmatch(written):
        return written  # a year: no thousands separator (style guides agree)
    if cls in ("date", "cardinal") and re.fullmatch(r"\d{4}", written) and not _is_year(cls, written, before):
        # the grammars read two number words as a year ("nineteen ninety five"), past 2099 too:
        # one tens word said twice is "fifty fifty", 50-50; other such "years" ("sixty sixty
        # one", mostly a repeated word) stay spoken
        if len(spoken) == 2 and spoken[0] == spoken[1] and spoken[0] in _TENS:
            number = 20 + 10 * _TENS.index(spoken[0])
            return f"{number}-{number}"
        if cls == "date":
            return None
    if cls == "ordinal" and _SMALL_ORDINAL.match(written):
        return None  # first to ninth are words
    if cls == "time":
        written = _HOUR.sub(r"\1", written)
        written = re.sub(r":00(?= [ap]\.m\.)", "", written)
        if spoken[-1] == "o'clock" and written.endswith(":00"):
            written = written[:-3] + " o'clock"
    elif cls == "date":
        words = [w.capitalize() if w in _MONTHS else w for w in written.split()]
        if len(words) in (2, 3) and words[0].isdigit() and words[1].lower() in _MONTHS:
            words[0], words[1] = words[1], words[0]  # "the fifth of march": March 5, not 5 March
        if len(words) == 3 and words[0] in (m.capitalize() for m in _MONTHS) and words[2].isdigit():
            words[1] += ","  # March 5, 2020
        written = " ".join(words)
    elif cls == "telephone" and re.search(r"[a-z]", written, re.IGNORECASE):
        return ""  # letters joined to digits: "a a two" -> "aa2", "two t v" -> "2tv" (disfluencies, names)
    elif cls == "telephone" and not all(w in DIGIT_WORDS for w in spoken):
        return None  # a count ("nine ten eleven twelve"), not a phone number: _one_by_one
    elif cls == "telephone" and re.fullmatch(r"\d{7}", written):
        written = f"{written[:3]}-{written[3:]}"
    elif cls == "money" and re.match(r"[a-z]", written, re.IGNORECASE):
        return ""  # a currency written as letters: "two real difficulties" -> "r2"
    elif cls in ("cardinal", "money", "measure", "decimal"):
        written = _LEADING_POINT.sub("0.", _group_digits(written))  # ".5%", "$.5": 0.5%, $0.5
        if cls == "money" and written.startswith("$0.") and spoken[-1] in ("cent", "cents"):
            written = f"{int(written[3:])} {spoken[-1]}"
        if cls == "measure":
            written = _measure(written, spoken)
            number, _, unit = written.partition(" ")
            if re.fullmatch(r"\d", number) and unit in _DURATIONS:
                return None  # zero to nine units of time are spelled out
    return written


_LEADING_POINT = re.compile(r"(?<!\d)\.(?=\d)")


def _is_year(cls: str, written: str, before: str | None) -> bool:
    """Is the four digits ``written`` a year (:data:`_YEAR`; read from two number words,
    a date, :data:`_SAID_YEAR` unless a year cue is ``before`` it)?"""
    if cls == "date" and before not in YEAR_CUES:
        return bool(_SAID_YEAR.fullmatch(written))
    return bool(_YEAR.fullmatch(written))


def _counted(cls: str, spoken: Sequence[str]) -> bool:
    """A token the house style refused that may be numbers said one after another: a
    "phone number" (any length) or a "year" from ten, eleven or twelve ("eleven twelve";
    other refused years, "sixty sixty one", mostly a repeated word, stay spoken)."""
    return cls == "telephone" or (cls == "date" and spoken[0] in _TEN_TO_TWELVE)


def _one_by_one(spoken: Sequence[str]) -> str | None:
    """Numbers said one after another, each written in the house style ("nine ten eleven
    twenty one" -> "nine 10 11 21": a tens word and a digit word are one number); None when
    a word is not a number of one or two words, or none is written as digits."""
    out: list[str] = []
    value = None
    for word in spoken:
        if value is not None and value % 10 == 0 and value >= 20 and word in _UNITS[1:10]:
            value += _UNITS.index(word)
            out[-1] = str(value)
            value = None
            continue
        if word in _UNITS:
            value = _UNITS.index(word)
        elif word in _TENS:
            value = 20 + 10 * _TENS.index(word)
        else:
            return None
        out.append(word if value < 10 else str(value))
    return " ".join(out) if any(w[0].isdigit() for w in out) else None


_DOLLARS = re.compile(r"\$(\d[\d,]*)")
_CENTS = re.compile(r"(\d{1,2}) cents?")


def _dollars_and_cents(found: list[tuple[int, int, str, bool]], words: Sequence[str]) -> list[tuple[int, int, str, bool]]:
    """"one dollar and twenty five cents": the grammars' two amounts ("$1", "25 cents") around
    "and" are one, "$1.25", as the style guides write it."""
    out: list[tuple[int, int, str, bool]] = []
    for a, b, text, whole in found:
        if out:
            pa, pb, ptext, _ = out[-1]
            dollars, cents = _DOLLARS.fullmatch(ptext), _CENTS.fullmatch(text)
            if dollars and cents and a == pb + 1 and words[pb] == "and":
                out[-1] = (pa, b, f"${dollars.group(1)}.{int(cents.group(1)):02d}", True)
                continue
        out.append((a, b, text, whole))
    # "one dollar and twenty five" with nothing after it yet: "cents" may come next, so the
    # words are held together as spoken ("") until a word after them decides
    for i in range(len(out) - 1, -1, -1):
        pa, pb, ptext, _ = out[i]
        if _DOLLARS.fullmatch(ptext):
            tail = words[pb + 1:]
            if (pb < len(words) and words[pb] == "and" and 0 < len(tail) <= 2
                    and all(_is_number_word(w) for w in tail)):
                out[i:] = [(pa, len(words), "", False)]
            break
    return out


def _group_digits(written: str) -> str:
    """Thousands separators in the integer parts of the numbers of ``written``."""
    return _DIGITS.sub(_grouped, written)


def _measure(written: str, spoken: Sequence[str]) -> str:
    """"5.5 %" -> "5.5%"; other units as spoken after the number ("10 kilometers per hour")."""
    number, _, unit = written.rpartition(" ")
    if not number:
        return written
    if unit == "%":
        return number + "%"
    last = max((i for i, w in enumerate(spoken) if w in NUMBER_WORDS or w == "point"), default=-1)
    tail = spoken[last + 1:]
    return f"{number} {' '.join(tail)}" if tail else written
