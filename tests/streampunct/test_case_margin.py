"""The truecasing head's margin for capitals (issue 37): weak capitals become lowercase,
so a period the model missed leaves no capital mid-sentence, and sentence starts keep theirs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from engines.base import EngineBase, HeadLogits
from streampunct.labels import (
    CAPITALIZED,
    LOWER,
    MIXED,
    PERIOD,
    UPPER,
    O,
    case_classes,
    check_case_margin,
)
from streampunct.text.normalize import render

# -- the rule ----------------------------------------------------------------


def test_capitalized_is_kept_at_and_above_the_margin_and_demoted_below():
    # rows: logit(capitalized) - logit(lower) = 1.0, 1.5, 2.0
    logits = np.array([[0.0, 1.0, -3.0, -3.0], [0.0, 1.5, -3.0, -3.0], [1.0, 3.0, -3.0, -3.0]])
    assert case_classes(logits, 1.5).tolist() == [LOWER, CAPITALIZED, CAPITALIZED]  # 1.5 is at the margin
    assert case_classes(logits, 1.6).tolist() == [LOWER, LOWER, CAPITALIZED]
    assert case_classes(logits, 2.5).tolist() == [LOWER, LOWER, LOWER]
    assert case_classes(logits, 0.5).tolist() == [CAPITALIZED] * 3


def test_other_classes_are_untouched():
    logits = np.array([[0.0, 0.5, 0.9, -3.0],    # UPPER, capitalized close to lower
                       [0.0, 0.5, -3.0, 0.7],    # MIXED
                       [2.0, 1.0, -3.0, -3.0]])  # LOWER
    assert case_classes(logits, 10.0).tolist() == [UPPER, MIXED, LOWER]


def test_margin_zero_is_the_argmax_and_bad_margins_are_refused():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((5, 7, 4)).astype(np.float32)
    assert np.array_equal(case_classes(logits, 0.0), logits.argmax(-1))
    assert np.array_equal(case_classes(logits), logits.argmax(-1))
    for bad in (-0.1, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match="case margin must be a finite number >= 0"):
            check_case_margin(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="case margin must be"):
        case_classes(logits, -1.0)


@settings(max_examples=300, deadline=None)
@given(logits=arrays(np.float32, st.tuples(st.integers(1, 12), st.just(4)),
                     elements=st.floats(-20, 20, width=32)),
       margin=st.floats(0, 10), more=st.floats(0, 10))
def test_a_margin_only_turns_capitalized_into_lower_and_more_margin_demotes_more(logits, margin, more):
    plain = logits.argmax(-1)
    got = case_classes(logits, margin)
    changed = got != plain
    assert (plain[changed] == CAPITALIZED).all() and (got[changed] == LOWER).all()
    # demoted words are exactly the capitals whose lead over lower is under the margin
    weak = (plain == CAPITALIZED) & (logits[:, CAPITALIZED] - logits[:, LOWER] < margin)
    assert np.array_equal(changed, weak)
    # a larger margin keeps a subset of the capitals
    larger = case_classes(logits, margin + more)
    assert not ((larger == CAPITALIZED) & (got != CAPITALIZED)).any()


# -- the stream and offline paths ----------------------------------------------

#: "is there anything else alright then alright john said nasa": the model misses the period
#: after "else" and puts one after "then"; its case head calls "alright" Capitalized weakly
#: (a sentence-start capital it learned), "john" strongly, "nasa" ALL CAPS.
WORDS = "is there anything else alright then alright john said nasa".split()
WEAK, STRONG = [0.0, 1.0, -4.0, -4.0], [0.0, 5.0, -4.0, -4.0]
TABLE = {"then": (PERIOD, None), "alright": (O, WEAK), "john": (O, STRONG), "nasa": (O, [0.0, 1.0, 3.0, -4.0])}
MARGIN = 2.0
WITH_MARGIN = "Is there anything else alright then. Alright John said NASA."
WITHOUT = "Is there anything else Alright then. Alright John said NASA."


class ChosenEngine(EngineBase):
    """Logits chosen per word (by its label token): punctuation one-hot, case rows as given;
    every other token O and lowercase."""

    name = "chosen"
    has_case = True

    def __init__(self, aligner, table=TABLE) -> None:
        self._rows = {}
        for word, (label, case) in table.items():
            ids = aligner.word_ids(word)
            self._rows[ids[aligner.label_offset(len(ids))]] = (label, case)

    def infer(self, input_ids, attention_mask):
        return self.infer_heads(input_ids, attention_mask).punctuation

    def infer_heads(self, input_ids, attention_mask):
        punct = np.zeros((*input_ids.shape, 4), dtype=np.float32)
        punct[..., O] = 1.0
        case = np.zeros((*input_ids.shape, 4), dtype=np.float32)
        case[...] = [0.0, -3.0, -4.0, -4.0]
        for token, (label, row) in self._rows.items():
            at = input_ids == token
            punct[at] = np.eye(4, dtype=np.float32)[label]
            if row is not None:
                case[at] = row
        return HeadLogits(punct, case)


def test_the_engine_labels_as_the_table_says(aligner):
    tokens = [aligner.word_ids(w)[aligner.label_offset(len(aligner.word_ids(w)))] for w in WORDS]
    assert len(set(tokens)) == len(set(WORDS))  # one label token per distinct word


def _heads(engine, request):
    """The engine's two heads over one request's rows, typed (as the core takes them)."""
    from engines.base import HeadLogits

    punctuation, case = engine.infer_heads(request.input_ids[None], None)
    return HeadLogits(punctuation[0], case[0])


def _stream(aligner, margin, *, partial=False):
    from streampunct.core.options import SessionOptions
    from streampunct.core.stream_state import StreamState
    from streampunct.core.windowing import WindowConfig

    engine = ChosenEngine(aligner)
    state = StreamState(aligner, WindowConfig(48, 8, 6), SessionOptions(right_context=2, max_delay_ms=600_000),
                        case_margin=margin)
    state.feed(WORDS, 0.0)
    if partial:
        request = state.next_request(0.0, partial=True, finals=False)
        assert request is not None and request.partial
        state.apply(request, _heads(engine, request))
        return state.last_partial
    state.end(0.0)
    finals = []
    while (request := state.next_request(0.0)) is not None:
        finals += state.apply(request, _heads(engine, request))
    return finals


@pytest.mark.parametrize("partial", [False, True], ids=["finals", "partials"])
def test_stream_state_takes_case_classes_with_its_margin(aligner, partial):
    got = _stream(aligner, MARGIN, partial=partial)
    plain = _stream(aligner, 0.0, partial=partial)
    first = got[0].index
    assert [d.word for d in got] == WORDS[first:]
    cases = {d.index: d.case for d in got}
    assert cases[4] == LOWER and cases[6] == LOWER  # weak capitals: dropped (the rule opens sentences)
    assert cases[7] == CAPITALIZED and cases[9] == UPPER  # the name and the acronym stay
    assert {d.index: d.case for d in plain}[4] == CAPITALIZED  # the plain argmax keeps the weak one
    if not partial:
        words, labels = [d.word for d in got], [d.label for d in got]
        assert render(words, labels, capitalize=True, cases=[d.case for d in got]) == WITH_MARGIN
        assert render(words, labels, capitalize=True, cases=[d.case for d in plain]) == WITHOUT


def test_stream_state_refuses_a_bad_margin(aligner):
    from streampunct.core.options import SessionOptions
    from streampunct.core.stream_state import StreamState
    from streampunct.core.windowing import WindowConfig

    with pytest.raises(ValueError, match="case margin must be a finite number >= 0, not -1"):
        StreamState(aligner, WindowConfig(48, 8, 6), SessionOptions(), case_margin=-1)


def test_offline_punctuator_uses_its_margin(aligner):
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.core.windowing import WindowConfig

    text = " ".join(WORDS)
    p = OfflineDecoder(ChosenEngine(aligner), aligner, WindowConfig(48, 8, 6), case_margin=MARGIN)
    assert p.punctuate_text(text, capitalize=True) == WITH_MARGIN
    assert p.labels_and_cases(WORDS)[1][4] == LOWER
    plain = OfflineDecoder(ChosenEngine(aligner), aligner, WindowConfig(48, 8, 6))
    assert plain.case_margin == 0.0
    assert plain.punctuate_text(text, capitalize=True) == WITHOUT


def test_the_python_api_streams_with_its_margin(aligner):
    from streampunct.api import Punctuator

    p = Punctuator.from_engine(ChosenEngine(aligner), aligner, case_margin=MARGIN)
    stream = p.stream(right_context=2, max_delay_ms=600_000, clock=lambda: 0.0)
    finals = stream.push(WORDS) + stream.end()
    assert " ".join(f.text for f in finals) == WITH_MARGIN
    assert p.punctuate(" ".join(WORDS)) == WITH_MARGIN


def test_hypothesis_words_take_the_learned_case_a_final_gives_them(aligner):
    """A partial writes "John" and "NASA" in the hypothesis as the finals will, not "john" and
    "nasa" (the case head labels the hypothesis's words in the partial's window too)."""
    from streampunct.api import Punctuator

    p = Punctuator.from_engine(ChosenEngine(aligner), aligner, case_margin=MARGIN)
    stream = p.stream(right_context=2, max_delay_ms=600_000, partials=True, clock=lambda: 0.0)
    stream.push(WORDS[:7])
    stream.hypothesis(WORDS[7:])
    partial = stream.partial
    assert [w.w for w in partial.hypothesis] == ["john", "said", "nasa"]
    assert partial.text.endswith("John said NASA")
    finals = stream.push(WORDS[7:]) + stream.end()
    assert " ".join(f.text for f in finals).endswith("John said NASA.")


async def test_a_server_session_drops_weak_capitals_mid_sentence_and_keeps_sentence_starts(aligner):
    from streampunct.client.stream_client import StreamClient
    from streampunct.server.app import ServerConfig, ServerRuntime, serve

    async def session_text(margin: float) -> str:
        server = await serve(ServerConfig(host="127.0.0.1", port=0),
                             ServerRuntime(lambda: ChosenEngine(aligner), aligner, model_name="chosen",
                                           case_margin=margin))
        try:
            await server.wait_ready()
            client = await StreamClient.connect(server.url, right_context=2, max_delay_ms=600_000,
                                                capitalize=True)
            await client.send_words(WORDS[:5])  # "else" and "alright" in one message, the rest in another
            await client.send_words(WORDS[5:])
            await client.end()
            texts = [m.text async for m in client if type(m).__name__ == "Final"]
        finally:
            await server.shutdown()
        return " ".join(texts)

    assert await session_text(MARGIN) == WITH_MARGIN
    assert await session_text(0.0) == WITHOUT


def test_a_server_refuses_a_bad_margin(aligner):
    from streampunct.server.app import ServerConfig, ServerRuntime, StreamServer

    with pytest.raises(ValueError, match="case margin must be"):
        StreamServer(ServerConfig(port=0), ServerRuntime(lambda: ChosenEngine(aligner), aligner, case_margin=-2.0))


def test_a_model_folder_margin_reaches_the_runtime(tmp_path):
    """``case_margin`` in streampunct.json: ModelInfo, the offline punctuator and the server read it."""
    import shutil

    from engines.model_meta import update_model_meta
    from streampunct.model import load_model_info
    from streampunct.server.app import ServerConfig, ServerRuntime
    from tests.conftest import REPO

    src = REPO / "models" / "default"
    folder = tmp_path / "m"
    folder.mkdir()
    for name in ("streampunct.json", "tokenizer.json"):
        shutil.copy(src / name, folder / name)
    update_model_meta(folder, case_margin=1.25, stream_artifact=None)
    info = load_model_info(folder)
    assert info.case_margin == 1.25
    assert ServerRuntime.from_model(ServerConfig(model_dir=folder, stream_cache="off")).case_margin == 1.25
    update_model_meta(folder, case_margin=None)
    assert load_model_info(folder).case_margin == 0.0
