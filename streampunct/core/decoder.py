"""The offline punctuator: double-overlap windows over a whole text, one engine.

``decode_offline`` is the decoder used everywhere a complete text is
punctuated (the ``punctuate`` command, evaluation, validation during
training, pseudo-labeling); it takes any ``infer`` callable so that training
can pass a torch model and the runtime an Engine.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from engines.base import Engine, StreamEngine
from engines.registry import StreamCacheMode, load_engine, load_stream_engine, streaming_backends
from streampunct.core.alignment import Aligner
from streampunct.core.windowing import TokenLayout, WindowConfig, pad_batch, plan_offline
from streampunct.errors import InputError
from streampunct.labels import (
    CASE_LABELS,
    LABELS,
    case_classes,
    check_case_margin,
    end_of_stream_label,
)
from streampunct.model import ModelInfo, load_model_info
from streampunct.text.normalize import (
    Affix,
    is_symbol_word,
    offline_tokens,
    render,
    render_with_symbols,
)

InferFn = Callable[[np.ndarray, np.ndarray], np.ndarray]
#: The classes an engine's logits have a token: punctuation, and a truecasing head's after them.
_CLASSES = (len(LABELS), len(LABELS) + len(CASE_LABELS))


def decode_offline(
    words: Sequence[str],
    aligner: Aligner,
    window: WindowConfig,
    infer: InferFn,
    *,
    batch_size: int = 32,
    progress: bool = False,
) -> np.ndarray:
    """Per-word logits float32[n_words, C] from double-overlap windows.

    ``words`` must be normalized (see :func:`streampunct.text.normalize.normalize_words`).
    ``progress`` shows a tqdm bar on stderr.
    """
    if not words:
        return np.zeros((0, 4), dtype=np.float32)
    ids: list[int] = []
    counts = []
    for w in words:
        wid = aligner.word_ids(w)
        ids.extend(wid)
        counts.append(len(wid))
    layout = TokenLayout.from_counts(counts, aligner.label_position)
    windows = plan_offline(layout, window)
    ids_arr = np.asarray(ids, dtype=np.int64)
    out: np.ndarray | None = None
    bar = tqdm(total=len(windows), desc="offline windows", unit="win", disable=not progress,
               file=sys.stderr, leave=False)
    for k in range(0, len(windows), batch_size):
        chunk = windows[k : k + batch_size]
        seqs = []
        for w in chunk:
            seq = np.empty(w.token_end - w.token_start + 2, dtype=np.int64)
            seq[0], seq[-1] = aligner.cls_id, aligner.sep_id
            seq[1:-1] = ids_arr[w.token_start : w.token_end]
            seqs.append(seq)
        input_ids, mask = pad_batch(seqs, aligner.pad_id)
        logits = np.asarray(infer(input_ids, mask), dtype=np.float32)
        if logits.ndim != 3 or logits.shape[:2] != input_ids.shape or logits.shape[2] not in _CLASSES:
            raise ValueError(f"the engine's logits have shape {logits.shape} for input of shape {input_ids.shape}: "
                             f"expected {[*input_ids.shape, len(LABELS)]} ({len(LABELS) + len(CASE_LABELS)} "
                             "classes with a truecasing head)")
        if out is None:
            out = np.zeros((len(words), logits.shape[-1]), dtype=np.float32)
        for row, w in enumerate(chunk):
            pos = np.asarray(layout.label_pos[w.first_word : w.last_word + 1]) - w.token_start + 1
            out[w.first_word : w.last_word + 1] = logits[row, pos]
        bar.update(len(chunk))
    bar.close()
    assert out is not None
    return out


def labels_from_logits(logits: np.ndarray, end_of_stream: bool) -> list[int]:
    """Argmax label ids of per-word punctuation logits; with ``end_of_stream`` the last word ends
    its sentence."""
    labels = [int(x) for x in np.argmax(logits, axis=-1)]
    if end_of_stream:
        labels[-1] = end_of_stream_label(labels[-1], logits[-1])
    return labels


class OfflineDecoder:
    """Punctuates complete texts with a model folder and an engine."""

    def __init__(
        self,
        engine: Engine,
        aligner: Aligner,
        window: WindowConfig,
        *,
        batch_size: int = 32,
        info: ModelInfo | None = None,
        stream_window: WindowConfig | None = None,
        case_margin: float | None = None,
    ) -> None:
        self.engine = engine
        self.aligner = aligner
        self.window = window
        #: The geometry of streaming windows (the server's), for simulations of a stream.
        self.stream_window = stream_window or window
        self.batch_size = batch_size
        self.info = info
        #: The truecasing head's margin for capitals (:func:`streampunct.labels.case_classes`):
        #: ``case_margin``, else the model folder's, else 0 (the plain argmax).
        self.case_margin = check_case_margin(
            case_margin if case_margin is not None else info.case_margin if info is not None else 0.0)
        self._stream_engine: StreamEngine | None = None  # loaded by stream_engine()

    @classmethod
    def from_model_dir(
        cls,
        model_dir: str | Path | None = None,
        *,
        engine: str = "onnxruntime",
        window: WindowConfig | None = None,
        batch_size: int = 32,
        **engine_options,
    ) -> OfflineDecoder:
        """The decoder of a model folder: its tokenizer first (a folder whose tokenizer fails
        loads no engine), then the engine, closed again when the decoder cannot be made."""
        info = load_model_info(model_dir)
        aligner = info.aligner()
        eng = load_engine(engine, info.path, **engine_options)
        try:
            return cls(eng, aligner, window or info.window, batch_size=batch_size, info=info,
                       stream_window=window or info.stream_window)
        except BaseException:
            eng.close()
            raise

    def logits(self, words: Sequence[str]) -> np.ndarray:
        return decode_offline(words, self.aligner, self.window, self.engine.infer, batch_size=self.batch_size)

    def punctuate(self, words: Sequence[str], *, end_of_stream: bool = True) -> list[int]:
        """Label ids for normalized words.

        The words are a complete text, so (as after a stream's ``end``) the
        last word gets a sentence mark: see
        :func:`streampunct.labels.end_of_stream_label`. ``end_of_stream=False``
        gives the model's plain argmax (what ``evaluate`` scores).
        """
        if not words:
            return []
        return labels_from_logits(self.logits(words), end_of_stream)

    @property
    def has_case(self) -> bool:
        """The model has a truecasing head (its engine returns case logits too)."""
        return bool(self.engine.has_case)

    def infer_all(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """The punctuation logits, followed by the case head's when the model has one
        (float32[B, T, 4] or [B, T, 8]), from one engine run: an ``infer`` callable for the
        offline decode of both heads (:meth:`head_logits`) and training's scorers. Streams
        take the heads apart (:mod:`streampunct.core.engine_call`)."""
        if not self.has_case:
            return self.engine.infer(input_ids, attention_mask)
        return np.concatenate(self.engine.infer_heads(input_ids, attention_mask), axis=-1)

    def labels_and_cases(self, words: Sequence[str], *, end_of_stream: bool = True
                         ) -> tuple[list[int], list[int] | None]:
        """Label ids and, for a model with a truecasing head, case classes of normalized words
        (one decode: both heads come from the same windows). The last word gets a sentence
        mark as in :meth:`punctuate`, unless ``end_of_stream`` is false."""
        if not words:
            return [], ([] if self.has_case else None)
        if not self.has_case:
            return self.punctuate(words, end_of_stream=end_of_stream), None

        out = self.head_logits(words)
        n = out.shape[1] - 4
        return (labels_from_logits(out[:, :n], end_of_stream),
                [int(x) for x in case_classes(out[:, n:], self.case_margin)])

    def head_logits(self, words: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """Per-word logits of both heads (float32[n_words, 8]: punctuation, then case) from
        one offline decode; a model without a truecasing head gives its 4 punctuation logits."""
        return decode_offline(words, self.aligner, self.window, self.infer_all, batch_size=self.batch_size,
                              progress=progress)

    def punctuate_text(self, text: str, *, capitalize: bool = False) -> str:
        """Punctuate raw text (any existing punctuation and casing is dropped first). With
        ``capitalize``, a model with a truecasing head writes names and acronyms too. A word
        made only of symbols (emoji) is written back as it is, in its place, with no mark, and
        the model does not see it (:func:`streampunct.text.normalize.offline_tokens`)."""
        tokens, affixes = offline_tokens(text.split())
        words = [t for t in tokens if not is_symbol_word(t)]
        if not tokens:
            raise InputError("no words in the input (empty, or only punctuation)")
        cases = None
        if not words:
            labels: list[int] = []
        elif capitalize and self.has_case:
            labels, cases = self.labels_and_cases(words)
        else:
            labels = self.punctuate(words)

        def render_words(run: list[str], run_labels: list[int], run_cases: list[int] | None, start: bool,
                         run_affixes: list[Affix] | None) -> str:
            return render(run, run_labels, capitalize=capitalize, sentence_start=start, cases=run_cases,
                          affixes=run_affixes)

        return render_with_symbols(tokens, labels, render_words, cases=cases, affixes=affixes)

    @property
    def has_stream_graph(self) -> bool:
        """The model folder has a streaming graph (cached left context, ``stream_artifact``)."""
        return bool(self.info is not None and self.info.meta.stream_artifact)

    def stream_engine(self, mode: StreamCacheMode | str = StreamCacheMode.AUTO, **options) -> StreamEngine | None:
        """The model's streaming engine for simulations of a stream, per ``mode``
        (``auto``: when the folder has a streaming graph, does not switch it off
        with ``"stream_cache": false``, and this punctuator's engine runs streaming graphs
        (onnxruntime, torch);
        ``on``: required; ``off``: None). Loaded once; closed with the punctuator."""
        try:
            mode = StreamCacheMode(mode)
        except ValueError:
            raise InputError(f"stream cache must be one of {', '.join(StreamCacheMode)}, not {mode!r}") from None
        if mode == StreamCacheMode.OFF:
            return None
        backends = streaming_backends()
        usable = self.has_stream_graph and self.engine.name in backends
        if not usable:
            if mode == StreamCacheMode.ON:
                raise InputError("--stream-cache on needs a model folder with a streaming graph "
                                 "(stream_artifact; python -m training.add_stream_graph) and an engine that "
                                 f"runs one ({', '.join(backends)})")
            return None
        if mode == StreamCacheMode.AUTO and self.info is not None and not self.info.stream_cache_auto:
            return None  # the folder switches it off: the server's auto serves whole windows too
        if self._stream_engine is None:
            assert self.info is not None
            self._stream_engine = load_stream_engine(self.engine.name, self.info.path, **options)
        return self._stream_engine

    def close(self) -> None:
        self.engine.close()
        if self._stream_engine is not None:
            self._stream_engine.close()
