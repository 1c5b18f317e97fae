"""Edges of the Python API's input (streampunct.api): words with no order, values too long to
show in a message, a relative model folder, and ``written_forms``' flag."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engines.registry import BACKENDS
from streampunct.api import Punctuator, written_forms
from streampunct.core.wire import Word
from streampunct.errors import InputError, ModelError
from streampunct.model import DEFAULT_MODEL_DIR
from tests.streampunct.conftest import TEST_WINDOW, FakeEngine

WORDS = ["so", "what", "do", "you", "think", "of", "it"]
SET_MESSAGE = "{name} must be a str or a sequence of words (a list or tuple), not a {kind}: a set has no order, and words have one"


def punctuator(aligner) -> Punctuator:
    return Punctuator.from_engine(FakeEngine(), aligner, window=TEST_WINDOW)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: set(WORDS), SET_MESSAGE.format(name="{name}", kind="set")),
        (lambda: frozenset(WORDS), SET_MESSAGE.format(name="{name}", kind="frozenset")),
        (lambda: iter(set(WORDS)), SET_MESSAGE.format(name="{name}", kind="set_iterator")),
        (
            lambda: dict.fromkeys(WORDS).keys(),
            "{name} must be a str or a sequence of words, not a dict_keys",
        ),
        (
            lambda: {i: w for i, w in enumerate(WORDS)}.values(),
            "{name} must be a str or a sequence of words, not a dict_values",
        ),
    ],
)
def test_words_with_no_order_are_refused_by_every_call_that_takes_words(aligner, make, message):
    """A set's iteration order is not the order the words were said in: refused, not shuffled."""
    p = punctuator(aligner)
    s = p.stream(right_context=1)
    for call, name in (
        (lambda w: s.push(w, now=0.0), "words"),
        (lambda w: s.hypothesis(w, now=0.0), "words"),
        (p.punctuate, "text"),
    ):
        with pytest.raises(InputError) as caught:
            call(make())
        assert str(caught.value) == message.format(name=name)
    assert s.n_words == 0 and s.n_final == 0


def test_ordered_words_are_taken_from_a_str_list_tuple_or_generator(aligner):
    p = punctuator(aligner)
    texts = set()
    for words in (
        " ".join(WORDS),
        list(WORDS),
        tuple(WORDS),
        (w for w in WORDS),
        iter(WORDS),
        [Word(w) for w in WORDS],
    ):
        s = p.stream(right_context=1)
        finals = s.push(words, now=0.0) + s.end(now=0.0)
        assert [w.w for f in finals for w in f.words] == WORDS
        texts.add(" ".join(f.text for f in finals))
    assert len(texts) == 1
    assert (
        p.punctuate(w for w in WORDS)
        == p.punctuate(tuple(WORDS))
        == p.punctuate(" ".join(WORDS))
        != ""
    )


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda p: p.stream().push(["hi"], now=10**400),
            "now must be a finite number of seconds, not an integer of 401 digits",
        ),
        (
            lambda p: p.stream().poll(now=-(10**5000)),  # no repr at all past 4300 digits
            "now must be a finite number of seconds, not a negative integer of 5001 digits",
        ),
        (
            lambda p: p.stream().push(["hi"], now="9" * 500),
            "now must be a finite number of seconds, not '99999999999999999999999... (502 characters)",
        ),
        (
            lambda p: p.stream().push([Word("hi", start=10**5000)], now=0.0),
            "Word.start must be None or a finite number of seconds, not an integer of 5001 digits",
        ),
        (
            lambda p: p.stream(clock=lambda: 10**400).push(["hi"]),
            "the stream's clock must return a finite number of seconds, not an integer of 401 digits",
        ),
        (
            lambda p: p.stream(partial_mark_threshold=10**400),  # was an OverflowError
            "partial_mark_threshold must be a number in [0, 1), not an integer of 401 digits",
        ),
        (
            lambda p: p.stream(partial_mark_threshold="x" * 300),
            "partial_mark_threshold must be a number in [0, 1), not 'xxxxxxxxxxxxxxxxxxxxxxx... (302 characters)",
        ),
        (
            lambda p: p.stream(partial_mark_threshold=1.5),
            "partial_mark_threshold must be a number in [0, 1), not 1.5",
        ),
        (
            lambda p: Punctuator.from_engine(FakeEngine(), p._decoder.aligner, case_margin=10**400),
            "case_margin must be a finite number >= 0, not an integer of 401 digits",
        ),
        (
            lambda p: Punctuator.from_engine(
                FakeEngine(), p._decoder.aligner, stream_cache_tokens=-(10**5000)
            ),
            "stream_cache_tokens must be None or an int >= 1, not a negative integer of 5001 digits",
        ),
        (
            lambda p: Punctuator.load(engine="x" * 1000),
            f"engine must be one of {', '.join(BACKENDS)}, not 'xxxxxxxxxxxxxxxxxxxxxxx... (1002 characters)",
        ),
        (
            lambda p: Punctuator.load(stream_cache="y" * 1000),
            "stream_cache must be one of auto, on, off, not 'yyyyyyyyyyyyyyyyyyyyyyy... (1002 characters)",
        ),
    ],
)
def test_a_refused_value_is_shown_short_in_the_message(aligner, call, message):
    """A message names what is wrong in one short line, whatever the size of the value."""
    with pytest.raises(InputError) as caught:
        call(punctuator(aligner))
    assert str(caught.value) == message


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(min_value=1, max_value=10**4000))
def test_a_refused_integer_is_shown_whole_or_by_its_exact_number_of_digits(aligner, n):
    with pytest.raises(InputError) as caught:
        Punctuator.from_engine(FakeEngine(), aligner, stream_cache_tokens=-n)
    shown = str(caught.value).removeprefix("stream_cache_tokens must be None or an int >= 1, not ")
    expected = str(-n) if len(str(-n)) <= 24 else f"a negative integer of {len(str(n))} digits"
    assert shown == expected


@pytest.mark.parametrize("folder", [Path(""), ".", Path("."), "sub", Path("sub/")])
def test_a_relative_folder_without_a_model_is_named_whole_with_what_it_lacks(
    tmp_path, monkeypatch, folder
):
    """``Path("")`` is ``Path(".")`` (no way to tell them apart): the current folder, named whole."""
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError) as caught:
        Punctuator.load(folder)
    where = tmp_path / "sub" if str(folder) == "sub" else tmp_path
    assert str(caught.value) == f"{where} is not a streampunct model folder: no streampunct.json"


def test_a_relative_model_folder_loads_as_its_absolute_path(monkeypatch):
    """``info.path`` stays right when the current folder changes later."""
    pytest.importorskip("onnxruntime")
    shipped = DEFAULT_MODEL_DIR.parent / DEFAULT_MODEL_DIR.name
    if not (shipped / "streampunct.json").is_file():
        pytest.skip("no shipped model in this checkout")
    monkeypatch.chdir(shipped.parent)
    with Punctuator.load(shipped.name, intra_op_threads=1) as p:
        assert p.info.path == shipped.absolute()
    monkeypatch.chdir(shipped)
    with Punctuator.load(".", intra_op_threads=1) as p:
        assert p.info.path == shipped.absolute()


def test_written_forms_takes_only_true_or_false_for_itn():
    """As ``load(itn=...)`` and ``punctuate(itn=...)`` do: 0 or "no" is not a flag (a truthy
    string loaded the grammars before)."""
    for value in (0, "", None, 1.0):
        with pytest.raises(InputError) as caught:
            written_forms(itn=value)
        assert str(caught.value) == "'itn' must be true or false"
    assert written_forms(itn=False).normalizer is None
    assert written_forms(itn=np.False_).normalizer is None
