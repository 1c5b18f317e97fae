"""Inverse text normalization with NeMo's grammars (the ``itn`` extra; skipped without it),
and the house style and number-word gate, which need no grammars."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from streampunct.errors import DependencyError
from streampunct.text import itn
from streampunct.text.written_form import Phrase

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("cls", "written", "spoken", "styled"), [
    ("time", "03:30", "three thirty", "3:30"),
    ("time", "07:00 p.m.", "seven p m", "7 p.m."),
    ("time", "10:15 a.m.", "ten fifteen a m", "10:15 a.m."),
    ("time", "10:00", "ten o'clock", "10 o'clock"),
    ("date", "march 5 2020", "march fifth twenty twenty", "March 5, 2020"),
    ("date", "5 march 2020", "the fifth of march twenty twenty", "March 5, 2020"),
    ("date", "4 july", "the fourth of july", "July 4"),
    ("date", "december 25", "december twenty fifth", "December 25"),
    ("date", "1990s", "nineteen nineties", "1990s"),
    ("money", "$25000", "twenty five thousand dollars", "$25,000"),
    ("money", "$1250000.75", "", "$1,250,000.75"),
    ("money", "$0.50", "fifty cents", "50 cents"),
    ("cardinal", "1200", "twelve hundred", "1,200"),
    ("decimal", ".5", "point five", "0.5"),
    ("decimal", "3.14159", "three point one four one five nine", "3.14159"),
    ("measure", "5.5 %", "five point five percent", "5.5%"),
    ("measure", "10 km/h", "ten kilometers per hour", "10 kilometers per hour"),
    ("telephone", "5551234", "five five five one two three four", "555-1234"),
    ("telephone", "555-123-4567", "five five five one two three four five six seven", "555-123-4567"),
    ("telephone", "1 555-123-4567", "one five five five one two three four five six oh", "1 555-123-4567"),
    ("telephone", "910111213", "nine ten eleven twelve thirteen", None),  # a count, not a phone number
    ("telephone", "5551", "five five five one", "5551"),  # digits of any count (a stream sees the first ones first)
    ("date", "1112", "eleven twelve", None),  # 1100-1299 is a year only after a year cue
    ("date", "1999", "nineteen ninety nine", "1999"),
    ("date", "2012", "twenty twelve", "2012"),
    ("measure", ".5 %", "point five percent", "0.5%"),
    ("money", "$.5", "point five dollars", "$0.5"),
    ("measure", ".25 mi", "point two five miles", "0.25 miles"),
    ("decimal", "-.5", "minus point five", "-0.5"),
    ("ordinal", "21st", "twenty first", "21st"),
    ("ordinal", "3rd", "third", None),
    ("telephone", "aa2", "a a two", ""),  # letters joined to digits stay spoken (one phrase)
    ("telephone", "2tv", "two t v", ""),
    ("money", "r2", "two real", ""),  # a currency written as letters
    ("measure", "9 h", "nine hours", None),  # zero to nine units of time are spelled out
    ("measure", "9 ft", "nine feet", "9 feet"),  # dimensions take figures
    ("measure", "6.5 h", "six point five hours", "6.5 hours"),
    ("measure", "20 min", "twenty minutes", "20 minutes"),
    ("date", "5050", "fifty fifty", "50-50"),  # one tens word said twice
    ("date", "9095", "ninety ninety five", None),  # not a year: a repeated word, stays spoken
    ("date", "2020", "twenty twenty", "2020"),
    ("cardinal", "3030", "thirty thirty", "30-30"),
])
def test_house_style(cls, written, spoken, styled):
    assert itn.house_style(cls, written, spoken.split() or ["x"]) == styled


def test_a_four_digit_cardinal_after_a_year_cue_is_a_year():
    spoken = "two thousand and twelve".split()
    assert itn.house_style("cardinal", "2012", spoken, before="in") == "2012"
    assert itn.house_style("cardinal", "2012", spoken, before="sold") == "2,012"
    assert itn.house_style("cardinal", "2000", ["two", "thousand"], before="year") == "2000"
    assert itn.house_style("cardinal", "3000", ["three", "thousand"], before="in") == "3,000"  # not a year


def test_ten_to_twelve_and_minutes_after_a_time_cue_are_a_clock_time():
    # the grammars read these as years
    assert itn.house_style("date", "1230", ["twelve", "thirty"], before="at") == "12:30"
    assert itn.house_style("date", "1115", ["eleven", "fifteen"], before="until") == "11:15"
    assert itn.house_style("date", "1005", ["ten", "oh", "five"], before="around") == "10:05"
    assert itn.house_style("date", "1230", ["twelve", "thirty"], before="in") == "1230"
    # no time cue, a year cue, hundreds, or not ten to twelve: as before
    assert itn.house_style("cardinal", "1230", ["twelve", "thirty"], before="room") == "1,230"
    assert itn.house_style("cardinal", "1230", ["twelve", "thirty"], before="in") == "1230"
    assert itn.house_style("cardinal", "1200", ["twelve", "hundred"], before="at") == "1,200"
    assert itn.house_style("cardinal", "1260", ["twelve", "sixty"], before="at") == "1,260"
    assert itn.house_style("cardinal", "1930", ["nineteen", "thirty"], before="at") == "1,930"


def test_a_run_of_grammar_tokens_is_cut_into_each_tokens_words():
    assert itn._token_words("five foot five inches".split(), 2) == [["five", "foot"], ["five", "inches"]]
    assert itn._token_words("two hundred and five feet".split(), 1) == [["two", "hundred", "and", "five", "feet"]]
    assert itn._token_words("five point two meters six".split(), 2) == [["five", "point", "two", "meters"], ["six"]]
    assert itn._token_words("five foot five inches".split(), 3) is None


def test_dollars_and_cents_around_and_are_one_amount():
    words = "one dollar and twenty five cents and two dollars".split()
    found = [(0, 2, "$1", True), (3, 6, "25 cents", True), (7, 9, "$2", True)]
    assert itn._dollars_and_cents(found, words) == [(0, 6, "$1.25", True), (7, 9, "$2", True)]
    # not around "and", or not cents after dollars: left as they are
    assert itn._dollars_and_cents([(0, 2, "$1", True), (2, 5, "25 cents", True)], words) == \
        [(0, 2, "$1", True), (2, 5, "25 cents", True)]
    assert itn._dollars_and_cents([(0, 2, "5%", True), (3, 6, "25 cents", True)], words) == \
        [(0, 2, "5%", True), (3, 6, "25 cents", True)]


def test_number_words_gate_the_grammars():
    words = "so we met and then twenty five people came along to see it all".split()
    assert itn._stretches(words) == [(2, 10)]
    assert itn._stretches("nothing to see here".split()) == []
    assert itn._stretches("the twenty-fifth".split()) == [(0, 2)]
    assert {"twentieth", "hundredth", "fifth", "twelfth", "ninth", "zero"} <= itn.NUMBER_WORDS


def test_a_long_run_of_number_words_is_searched_in_pieces_of_bounded_length():
    """A search's time and memory grow faster than its stretch (1000 number words in one
    hypothesis took 5 s and 480 MB): a run is cut into adjacent stretches of at most
    MAX_STRETCH_WORDS words that cover it."""
    words = ["said"] + ["three", "one", "two", "twenty"] * 250 + ["then"]
    stretches = itn._stretches(words)
    assert len(stretches) >= len(words) // itn.MAX_STRETCH_WORDS
    assert all(b - a <= itn.MAX_STRETCH_WORDS for a, b in stretches)
    assert stretches[0][0] == 0 and stretches[-1][1] == len(words)
    assert all(b == c for (_, b), (c, _) in zip(stretches[:-1], stretches[1:], strict=True))  # adjacent, no gap or overlap
    # ordinary phrases are one stretch, as before
    assert itn._stretches("it was nineteen ninety nine and two thousand and one".split()) == [(0, 10)]


def test_a_lone_small_number_word_is_searched_only_beside_a_unit_currency_time_or_date_word():
    if itn._companions() is None:
        pytest.skip("needs the itn extra (the grammars' unit and currency names)")
    assert itn._stretches("so then one of them said no".split()) == []
    assert itn._stretches("we were the first there".split()) == []
    for text in ["it took five minutes", "a two kilometer walk", "about five percent", "at five o'clock",
                 "five p m today", "it cost five dollars", "one point five", "on the fifth of march",
                 "may first", "half past two", "three degrees celsius", "seven square feet"]:
        assert itn._stretches(text.split()), text
    # another number word near it: searched as before
    assert itn._stretches("one or two of them".split()) == [(0, 5)]
    assert itn._is_companion("kilometers", itn._companions()) and itn._is_companion("inches", itn._companions())
    assert not itn._is_companion("things", itn._companions())


def test_number_words_after_until_search_only_when_a_phrase_could_reach_back():
    words = "it was fine and then twenty dollars".split()
    assert itn._stretches(words, until=4) == []  # "and then" cannot begin a phrase
    assert itn._stretches(words, until=5) == []
    assert itn._stretches(words, until=6) == [(2, 7)]  # "twenty" itself is needed
    assert itn._stretches("we met in march twenty twelve".split(), until=4) == [(1, 6)]  # "march" may
    assert itn._stretches("at half past two".split(), until=2) == [(0, 4)]
    # a stretch that merges into one already needed is searched whole
    assert itn._stretches("paid twenty and then five".split(), until=2) == [(0, 5)]


def test_number_words_before_first_are_context_and_start_no_stretch():
    words = "it cost twenty dollars and then five more".split()
    assert itn._stretches(words) == [(0, 8)]
    assert itn._stretches(words, first=3) == [(3, 8)]  # "twenty" is context: only "five" searches
    assert itn._stretches(words, first=7) == []
    # a number word at first or later still sees the words before it
    assert itn._stretches("at twenty five past".split(), first=2) == [(0, 4)]


def test_load_without_the_extra_names_it(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pynini(name, *args, **kwargs):
        if name == "pynini" or name.startswith("nemo_text_processing"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynini)
    with pytest.raises(DependencyError, match=r"the 'itn' extra: pip install -e '\.\[itn\]' in the streampunct checkout"):
        itn.load_normalizer()


@pytest.fixture(scope="module")
def nemo():
    if not itn.available():
        pytest.skip("needs the itn extra (nemo-text-processing, pynini)")
    return itn.load_normalizer()  # compiled once into ~/.cache/streampunct/itn, then loaded


def written(normalizer, text: str) -> str:
    words = text.split()
    out, i = [], 0
    for p in (p for p in normalizer.phrases(words) if p.text):  # "": as spoken
        out += words[i:p.start] + [p.text]
        i = p.end
    return " ".join(out + words[i:])


@pytest.mark.slow
@pytest.mark.parametrize(("spoken", "expected"), [
    ("the meeting is at three thirty on march fifth", "the meeting is at 3:30 on March 5"),
    ("it costs twenty five dollars", "it costs $25"),
    ("it costs twenty-five dollars", "it costs $25"),
    ("i have five dogs and the first one is old", "i have five dogs and the first one is old"),
    ("call five five five one two three four now", "call 555-1234 now"),
    ("about five point five percent of them", "about 5.5% of them"),
    ("the twenty first century", "the 21st century"),
    ("he is five foot five inches tall", "he is 5 foot 5 inches tall"),  # two measures, each its unit
    ("it took two hours thirty minutes", "it took two hours 30 minutes"),  # each measure its own phrase
    ("the meeting lasted nine hours and forty minutes", "the meeting lasted nine hours and 40 minutes"),
    ("it is a fifty fifty chance", "it is a 50-50 chance"),
    ("we left at a quarter past four", "we left at a quarter past four"),  # not "a 4:15"
    ("we left at quarter past four", "we left at 4:15"),
    ("it was the hundredth time and a hundredth of a second", "it was the 100th time and a hundredth of a second"),
    ("she retired in two thousand and twelve", "she retired in 2012"),
    ("the meeting is on the fifth of march twenty twenty", "the meeting is on March 5, 2020"),
    ("we met on the first of may and again on may first", "we met on May 1 and again on May 1"),
    ("the snack costs one dollar and twenty five cents", "the snack costs $1.25"),
    ("it was five dollars and five cents", "it was $5.05"),
    ("it was five dollars and five", "it was five dollars and five"),  # "cents" may follow: held as spoken
    ("five dollars and five people came", "$5 and five people came"),
    ("so i said to him that we should go", "so i said to him that we should go"),
    ("lunch is at twelve thirty and we leave around ten fifteen", "lunch is at 12:30 and we leave around 10:15"),
    ("the castle was built in twelve thirty", "the castle was built in 1230"),
    ("they sold eleven cars and ten trucks but five vans", "they sold 11 cars and 10 trucks but five vans"),
    ("the galaxy holds a hundred billion stars", "the galaxy holds 100 billion stars"),
    ("about a thousand people came and one in a million", "about 1,000 people came and one in a million"),
    ("there are two real problems with a a two story house", "there are two real problems with a a two story house"),
])
def test_nemo_phrases(nemo, spoken, expected):
    assert written(nemo, spoken) == expected


@pytest.mark.slow
def test_nemo_phrases_are_aligned_to_words_and_other_classes_stay_spoken(nemo):
    words = "for example mister smith paid twenty dollars at w w w dot shop dot com".split()
    assert nemo.phrases(words) == [Phrase(5, 7, "$20")]  # not "e.g.", "mr." or the URL


@pytest.mark.slow
def test_every_phrase_begins_with_a_number_word_or_an_opener(nemo):
    """What lets a stream skip the searches no phrase of a final's words can reach
    (itn._stretches, ``until``): the acceptance sentences and the shapes the grammars know."""
    lines = (REPO / "data" / "itn_phrases.tsv").read_text(encoding="utf-8").splitlines()
    sentences = [line.split("\t")[1] for line in lines if line and not line.startswith("#")]
    sentences += ["we met at quarter past five", "on the fifth of march then", "half past two today",
                  "in march twenty twelve", "point five percent", "i forty nine north", "f x two"]
    starts = set()
    for sentence in sentences:
        words = sentence.split()
        starts |= {words[p.start] for p in nemo.phrases(words)}
    assert len(starts) > 10
    assert {w for w in starts if not itn._is_number_word(w) and w not in itn.OPENERS} == set()


@pytest.mark.slow
def test_grammars_in_a_worker_process_write_the_same_phrases(nemo):
    """ProcessNormalizer (serve --itn-workers): the same answers, from a spawned process that
    loads the grammars from the cache; number-free text never leaves this process."""
    processes = itn.ProcessNormalizer(workers=1)
    try:
        processes.start()
        for spoken in ("the meeting is at three thirty on march fifth", "it costs twenty five dollars",
                       "call five five five one two three four now", "so i said to him that we should go",
                       "it took two hours thirty minutes"):
            words = spoken.split()
            assert processes.phrases(words) == nemo.phrases(words)
        assert processes._stretch.cache_info().currsize == 4  # the number-free sentence was not sent
        # several forms side by side are not one whole form, in this process as in the worker
        assert [p.whole for p in nemo.phrases("it took two hours thirty minutes".split())] == [True]
        assert [(p.text, p.whole) for p in nemo.phrases("he is five foot five inches tall".split())] == [
            ("5 foot 5 inches", False)]
    finally:
        workers = list(processes._pool._processes.values())
        processes.close()
    import multiprocessing.connection

    # closed: the workers have exited (a sentinel is ready once its process has, whoever reaps it)
    assert workers and len(multiprocessing.connection.wait([w.sentinel for w in workers], 0)) == len(workers)


@pytest.mark.slow
def test_a_worker_process_exits_with_a_server_killed_outright(nemo):
    """SIGKILL (or the OOM killer) runs no cleanup in the server: its ITN workers see their parent
    go and exit instead of staying behind for good."""
    import signal
    import subprocess
    import sys

    code = ("from streampunct.text import itn\n"
            "p = itn.ProcessNormalizer(workers=1)\n"
            "p.start()\n"
            "print(*[w.pid for w in p._pool._processes.values()], flush=True)\n"
            "import time; time.sleep(600)\n")
    server = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        (pid,) = map(int, server.stdout.readline().split())
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()

    import select

    if not hasattr(os, "pidfd_open"):
        pytest.skip("waits on a pidfd (Linux)")
    try:
        exited = os.pidfd_open(pid)  # readable once the process has exited
    except ProcessLookupError:
        return  # gone already
    try:
        readable, _, _ = select.select([exited], [], [], 20.0)
    finally:
        os.close(exited)
    assert readable, f"ITN worker {pid} outlived its killed server"


@pytest.mark.slow
def test_a_worker_process_ignores_stop_signals_meant_for_its_server(nemo):
    """Ctrl-C in a terminal signals the whole process group, systemd's stop (KillMode=
    control-group) every process: the server stops its workers itself once its draining
    sessions' texts are written, so a worker no longer dies of SIGINT, SIGTERM or SIGHUP
    mid-call (those numbers stayed spoken)."""
    import signal

    processes = itn.ProcessNormalizer(workers=1)
    processes.start()
    try:
        (worker,) = processes._pool._processes.values()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            os.kill(worker.pid, sig)
        # the same worker answers after it (a dead one would break the pool)
        assert processes._pool.submit(itn._worker_ready).result(timeout=60) is True
        assert [w.pid for w in processes._pool._processes.values()] == [worker.pid] and worker.exitcode is None
    finally:
        processes.close()


@pytest.mark.slow
async def test_a_server_runs_the_grammars_in_its_worker_process(aligner):
    """serve --itn-grammars on (--itn-workers 1): the grammars load in a worker before the server
    is ready, itn sessions get written numbers, and shutdown stops the worker."""
    if not itn.available():
        pytest.skip("needs the itn extra (nemo-text-processing, pynini)")
    from streampunct.client.stream_client import StreamClient, Transcript
    from streampunct.core.wire import Final
    from streampunct.server.app import ServerConfig, ServerRuntime, serve
    from tests.streampunct.conftest import TEST_WINDOW, FakeEngine

    server = await serve(ServerConfig(host="127.0.0.1", port=0, itn_grammars="on"),
                         ServerRuntime(FakeEngine, aligner, TEST_WINDOW, "fake"))
    try:
        await server.wait_ready()
        workers = server._itn_processes
        assert isinstance(workers, itn.ProcessNormalizer)
        client = await StreamClient.connect(server.url, right_context=1, max_delay_ms=60_000, itn=True)
        await client.send_words("it costs twenty five dollars and that is all".split())
        await client.end()
        transcript, texts = Transcript(), []
        async for message in client:
            transcript.apply(message)
            texts += [message.text] if isinstance(message, Final) else []
        assert "$25" in " ".join(texts)
        assert transcript.words == "it costs twenty five dollars and that is all".split()
    finally:
        await server.shutdown()
    with pytest.raises(RuntimeError, match="shutdown"):
        workers._pool.submit(itn._worker_ready)


def test_normalizers_answer_at_once_or_say_they_would_wait():
    """Inside without_waiting the grammars' normalizers answer number-free words (and cached
    stretches) without their grammars, and raise WouldWait for a stretch they would search."""
    from streampunct.text.written_form import WouldWait, without_waiting

    searched: list[tuple[str, ...]] = []
    nemo = itn.NemoNormalizer(object())
    nemo._stretch._compute = lambda words: searched.append(words) or (Phrase(0, len(words), "25"),)
    assert nemo.answers_at_once and itn.ProcessNormalizer.answers_at_once
    with without_waiting():
        assert nemo.phrases("so i said to him that we should go".split()) == []
        with pytest.raises(WouldWait):
            nemo.phrases("we paid twenty five".split())
    assert searched == []
    assert nemo.phrases("we paid twenty five".split()) == [Phrase(0, 4, "25")]  # outside: searched
    with without_waiting():
        assert nemo.phrases("we paid twenty five".split()) == [Phrase(0, 4, "25")]  # cached
    assert searched == [("we", "paid", "twenty", "five")]


def test_a_search_fetched_elsewhere_is_shared_and_then_answered_at_once():
    """ProcessNormalizer's WouldWait.fetch: the search runs as a future (a worker process; a
    thread here), callers asking while it runs share it, and its answer is then cached."""
    import concurrent.futures
    import threading

    from streampunct.text.written_form import WouldWait, without_waiting

    release = threading.Event()
    submitted: list[tuple[str, ...]] = []

    def search(words):
        assert release.wait(10)
        return (Phrase(0, len(words), "25"),)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        def submit(words):
            submitted.append(words)
            return pool.submit(search, words)

        cache = itn._StretchCache(lambda words: pytest.fail("searched in the caller"), 8, submit=submit)
        words = ("paid", "twenty", "five")
        with without_waiting(), pytest.raises(WouldWait) as waited:
            cache(words)
        assert waited.value.fetch is not None
        first, second = waited.value.fetch(), cache.fetch(words)
        assert first is second and submitted == [words]
        stored = threading.Event()
        first.add_done_callback(lambda f: stored.set())  # runs after the cache's own callback
        release.set()
        assert stored.wait(10) and first.result() == (Phrase(0, 3, "25"),)
        with without_waiting():
            assert cache(words) == (Phrase(0, 3, "25"),)
        assert cache.fetch(words).result(0) == (Phrase(0, 3, "25"),) and submitted == [words]


def test_class_runs_cover_the_words_in_order():
    """The grammars' plain words ("and") are one word each and their numbers take the words
    between: the "and" after "twelve" is not the one inside the number."""
    year = ("cardinal", {"integer": "2012"})
    words = "in two thousand and twelve and".split()
    assert itn._class_runs(words, [("name", "in"), year, ("name", "and")]) == [(1, 5, 1, 2)]
    money = ("money", {"integer_part": "20"})
    assert itn._class_runs("twenty dollars dollars".split(), [money, ("name", "dollars")]) == [(0, 2, 0, 1)]
    # where two covers put a number on other words, it is left out; a rewritten name is a gap
    both = ("cardinal", {}), ("name", "and"), ("cardinal", {})
    assert itn._class_runs("one and two and three".split(), list(both)) == []
    cat = [("name", "CAT5"), ("cardinal", {})]  # one run, not all written: skipped by the caller
    assert itn._class_runs("cat five ten".split(), cat) == [(0, 3, 0, 2)]
    assert itn._class_runs("a b".split(), [("name", "a"), ("name", "a")]) == []  # no cover


def test_numbers_said_one_by_one():
    assert itn._one_by_one("nine ten eleven twenty one".split()) == "nine 10 11 21"
    assert itn._one_by_one("one two three".split()) is None  # nothing written as digits
    assert itn._one_by_one("eleven hundred".split()) is None


@pytest.mark.slow
@pytest.mark.parametrize(("spoken", "expected"), [
    ("it was in two thousand and twelve and i paid", "it was in 2012 and i paid"),
    ("it costs twenty dollars dollars", "it costs $20 dollars"),
    ("three hundred and twenty and", "320 and"),
    ("the rate is three point five point", "the rate is 3.5 point"),
    ("it rose point five percent", "it rose 0.5%"),
    ("it costs point five dollars", "it costs $0.5"),
    ("it is point two five miles", "it is 0.25 miles"),
    ("nine ten eleven twelve thirteen", "nine 10 11 12 13"),
    ("the score was eleven twelve", "the score was 11 12"),
    ("pages eleven twelve thirteen", "pages 11 12 13"),
    ("one two three", "123"),  # digit words: a phone number's first digits as a stream sees them
    ("call five five five one two three four five six seven", "call 555-123-4567"),
    ("born in nineteen ninety nine or twenty twelve", "born in 1999 or 2012"),
])
def test_nemo_phrases_cover_their_own_words(nemo, spoken, expected):
    assert written(nemo, spoken) == expected


@pytest.mark.slow
def test_rendered_numbers_show_every_word_once_in_order(nemo):
    """Property: over random runs of number words, "and", units and other words, the text
    keeps the other words in order, shows each unit once (as a word or in "$"/"%"), and
    each written phrase is what its own words read alone give (no word read twice)."""
    import random

    rng = random.Random(7)
    numbers = "one two five seven ten twelve twenty thirty ninety hundred thousand point".split()
    fillers = ("we", "went", "cat", "home")
    vocab = [*numbers, "and", "and", "dollars", "percent", *fillers]
    for _ in range(120):
        words = [rng.choice(vocab) for _ in range(rng.randint(3, 9))]
        shown = written(nemo, " ".join(words)).split()
        assert [w for w in shown if w in fillers] == [w for w in words if w in fillers], words
        for unit, sign in (("dollars", "$"), ("percent", "%")):
            assert shown.count(unit) + sum(w.count(sign) for w in shown) == words.count(unit), words
        assert shown.count("and") <= words.count("and"), words
        for p in nemo.phrases(words):
            alone = " ".join(q.text for q in nemo.phrases(words[p.start:p.end]))
            assert alone.replace(",", "") == p.text.replace(",", ""), (words, p)


@pytest.mark.slow
def test_numbers_side_by_side_keep_their_commas(nemo):
    """docs/protocol.md's example: "ten, twenty, thirty" is three forms, each written."""
    from streampunct.labels import COMMA, PERIOD
    from streampunct.text.written_form import Formatter, Lexicon

    render = Formatter(Lexicon(), nemo).render
    assert render("ten twenty thirty".split(), [COMMA, COMMA, PERIOD], sentence_start=False) == "10, 20, 30."
    assert render("twenty thirty forty".split(), [COMMA, COMMA, PERIOD], sentence_start=False) == (
        "twenty, thirty, forty.")  # read as the "year" 3040: left spoken


@pytest.mark.slow
@pytest.mark.parametrize("right_context", [0, 1, 3])
def test_streamed_written_forms_do_not_depend_on_the_chunking(nemo, right_context):
    """One word a message at right context 0, 1 or 3 (each final decided with a few words after
    it or none), a stream writes each sentence as its finals' words and marks written in one piece
    would be: times before "m", money before "and", dates after a month, numbers across the
    commas the model puts between digits, a year's "oh", an opener before a number, "quarter to" and
    "ten past" before the hour, a number word after a sum that ends on one ("one dollar five two"),
    "the fourth" before "of july"."""
    from streampunct import Punctuator
    from streampunct.labels import ID_TO_MARK
    from streampunct.model import DEFAULT_MODEL_DIR

    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL_DIR}")
    p = Punctuator.load(itn=True, capitalize=False)  # the grammars the fixture compiled
    formatter = p.written.formatter(itn=True, lexicon=(), capitalize=False)
    for spoken in ["the store opens at seven p m", "the coffee was two dollars and fifty cents today",
                   "the race is on april twenty fifth", "she was born on june twelfth nineteen eighty",
                   "call me at five five five one two three four", "the museum opened in nineteen oh five",
                   "the galaxy holds a hundred billion stars", "the survey asked one thousand two hundred adults",
                   "it costs one dollar five two of them", "we left at quarter to nine ok",
                   "see you at ten past seven ok",
                   # an ordinal before "of" and a month (found by an outside client, 2026-12-02: at right
                   # contexts 0 and 1 "the fourth" was written before "of july" came)
                   "we met on the fourth of july in paris", "it was the twenty first of march then",
                   # money with cents, whose reading the grammars find only once "cents" comes ("one
                   # hundred and ninety six dollars and forty" has none), and across the commas
                   # the model puts in it ("three hundred, six dollars")
                   "it costs one hundred and ninety six dollars and forty cents today",
                   "we paid three hundred six dollars and sixty cents for it"]:
        s = p.stream(right_context=right_context, max_delay_ms=600_000, itn=True, capitalize=False)
        finals = [f for w in spoken.split() for f in s.push([w])] + s.end()
        words = [w.w for f in finals for w in f.words]
        labels = [ID_TO_MARK.index(w.p) for f in finals for w in f.words]
        assert words == spoken.split()
        whole = formatter.render(words, labels, (), sentence_start=True, phrases=formatter.phrases(words, labels))
        assert " ".join(f.text for f in finals if f.text) == whole, spoken


@pytest.mark.slow
@pytest.mark.parametrize(("lexicon", "chunks", "written"), [
    ([("a b c", "ABC")], [["we", "left", "at", "five", "a"], ["m", "today"]], "5 a.m."),
    ([("and so on", "etc.")], [["it", "costs", "one", "hundred", "and"], ["five", "dollars"]], "$105"),
])
def test_a_lexicon_phrase_a_number_goes_on_with_does_not_cut_the_number(nemo, lexicon, chunks, written):
    """A final ending in a word that opens a lexicon entry ("a" of "a b c", "and" of "and so
    on") holds it for the entry, and the number before it with it: the next words may be the
    number's rest ("a m", "five dollars"), as offline reads them."""
    from streampunct import Punctuator
    from streampunct.model import DEFAULT_MODEL_DIR

    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL_DIR}")
    p = Punctuator.load(itn=True, capitalize=False)
    s = p.stream(right_context=0, max_delay_ms=600_000, itn=True, capitalize=False, lexicon=lexicon)
    finals = [f for c in chunks for f in s.push(c)] + s.end()
    assert written in " ".join(f.text for f in finals if f.text)


@pytest.mark.slow
def test_a_resumed_stream_takes_the_rest_of_a_form_its_context_ends_with(nemo):
    """docs/protocol.md, "Across finals": a resume's context that ends in a form ("three thirty":
    "3:30", written on the old connection) is one the next words go on with ("p m": "p.m."), as
    on an unbroken stream; words that go on with it otherwise stay spoken, as before."""
    from streampunct.core.wire import ConfigRequest, PunctuatedWord, ResumeRequest, SessionOptions
    from streampunct.text.written_form import Lexicon, WrittenForms
    from tests.streampunct.test_session_written import Driver

    for context, words, written in [("we meet at three thirty", "p m on friday", "p.m. on friday"),
                                    ("it costs twenty", "five dollars today", "five dollars today")]:
        driver = Driver(SessionOptions(right_context=1, max_delay_ms=60_000), written=WrittenForms(Lexicon(), nemo))
        given = tuple(PunctuatedWord(w, "") for w in context.split())
        driver.send(ResumeRequest(len(given), given, ConfigRequest(itn=True), held=0))  # all written
        driver.stream(words)
        assert " ".join(f.text for f in driver.finals() if f.text).rstrip(".") == written


def test_the_api_names_its_own_argument_for_a_cache_it_cannot_make(tmp_path):
    pytest.importorskip("pynini", reason="needs the itn extra")
    from streampunct.api import written_forms
    from streampunct.errors import InputError

    cache = tmp_path / "cache.txt"
    cache.write_text("x")
    with pytest.raises(InputError, match=rf"^itn_cache {cache}: cannot make the folder for the compiled grammars"):
        written_forms(itn=True, itn_cache=cache)


@pytest.mark.slow
@pytest.mark.parametrize("right_context", [0, 1, 2])
def test_a_resume_without_held_writes_each_word_once_with_the_grammars(nemo, right_context):
    """A client that knows only the protocol resumes without ``held``: the server infers it by
    replaying the context's last finals. A form the old connection wrote whole ("ten past
    seven" before "i") is not written again, and a number it held ("twenty" before "five
    dollars") is written with the words sent again, at right context 0 too (found by a probe)."""
    from streampunct.core.wire import (
        ConfigRequest,
        EndRequest,
        PunctuatedWord,
        ResumeRequest,
        SessionOptions,
        Word,
        WordsMessage,
    )
    from streampunct.text.written_form import Lexicon, WrittenForms
    from tests.streampunct.test_session_written import Driver

    options = SessionOptions(right_context=right_context, max_delay_ms=60_000, itn=True)
    for text, cut in [("good went ten past seven i fifty percent", 6),
                      ("it costs twenty five dollars today", 3)]:
        words = text.split()

        def run(driver: Driver, items: list[str]) -> list:
            for w in items:
                driver.send(WordsMessage((Word(w),)))
            return driver.finals()

        whole = Driver(options, written=WrittenForms(Lexicon(), nemo))
        run(whole, words)
        whole.send(EndRequest())
        unbroken = " ".join(f.text for f in whole.finals() if f.text)
        before = Driver(options, written=WrittenForms(Lexicon(), nemo))
        finals = [f for f in run(before, words[:cut + right_context]) if f.start < cut or not f.words]
        finals = [f for f in finals if f.start + len(f.words) <= cut]
        context = tuple(PunctuatedWord(x.w, x.p) for f in finals for x in f.words)
        after = Driver(options, written=WrittenForms(Lexicon(), nemo))
        after.send(ResumeRequest(len(context), context, ConfigRequest(right_context=right_context, itn=True)))
        run(after, words[len(context):])
        after.send(EndRequest())
        assert " ".join(f.text for f in finals + after.finals() if f.text) == unbroken, (text, right_context)
