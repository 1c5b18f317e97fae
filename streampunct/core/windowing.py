"""Double-overlap windows over sub-word tokens (Chen et al.), pure functions.

A window of at most ``size`` content tokens (the model also sees CLS and SEP)
keeps a word's prediction only where the word's label token has at least
``left`` tokens of context before it inside the window and ``right`` after it,
except at the edges of the stream. Windows start and end on word boundaries,
so a word is never cut. Offline decoding walks the text with windows chosen
this way (step about ``size - left - right``); streaming uses the same
selection on the words that are decidable so far.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Positions of the encoders streampunct runs (BERT, MiniLM, MPNet): a window's content
#: tokens plus CLS and SEP must fit in them.
MAX_POSITIONS = 512


@dataclass(frozen=True)
class WindowConfig:
    """Window geometry in content tokens.

    Attributes:
        size: W, the most content tokens in one model call (the model sees W + 2).
        left: L, context tokens required before a decided word's label token.
        right: R, context tokens required after it.
    """

    size: int = 126
    left: int = 40
    right: int = 20

    def __post_init__(self) -> None:
        if self.left < 0 or self.right < 0:
            raise ValueError("window left/right overlaps must be >= 0")
        if self.size < 1:
            raise ValueError("window size must be >= 1")

    @property
    def step(self) -> int:
        return self.size - self.left - self.right

    def validate_for(self, max_word_tokens: int, max_positions: int | None = None) -> None:
        """Refuse geometries where a window cannot hold context plus two whole words, or
        (given ``max_positions``, e.g. :data:`MAX_POSITIONS`) where the model would see
        more positions (``size + 2``) than it has."""
        need = self.left + self.right + 2 * max_word_tokens
        if self.size < need:
            raise ValueError(
                f"window size {self.size} is too small for left={self.left}, right={self.right} "
                f"and words of up to {max_word_tokens} tokens (need >= {need})"
            )
        if max_positions is not None and self.size + 2 > max_positions:
            raise ValueError(
                f"window size {self.size} is too large: the model sees size + 2 tokens and has "
                f"{max_positions} positions (size <= {max_positions - 2})"
            )

    def to_dict(self) -> dict[str, int]:
        return {"size": self.size, "left": self.left, "right": self.right}


@dataclass(frozen=True)
class Window:
    """One model call: content tokens ``[token_start, token_end)``, deciding words
    ``first_word .. last_word`` (inclusive)."""

    token_start: int
    token_end: int
    first_word: int
    last_word: int


@dataclass
class TokenLayout:
    """Token positions of a word sequence: ``starts[j]``/``ends[j]`` bound word j's
    tokens, ``label_pos[j]`` is the token that carries its label."""

    starts: list[int]
    ends: list[int]
    label_pos: list[int]

    @classmethod
    def from_counts(cls, counts: Sequence[int], label_position: str = "last") -> TokenLayout:
        starts, ends, label_pos = [], [], []
        pos = 0
        for c in counts:
            if c < 1:
                raise ValueError("every word has at least one token")
            starts.append(pos)
            label_pos.append(pos + (c - 1 if label_position == "last" else 0))
            pos += c
            ends.append(pos)
        return cls(starts, ends, label_pos)

    def append(self, n_tokens: int, label_offset: int) -> None:
        start = self.ends[-1] if self.ends else 0
        self.starts.append(start)
        self.label_pos.append(start + label_offset)
        self.ends.append(start + n_tokens)

    def __len__(self) -> int:
        return len(self.starts)


def select_window(
    layout: TokenLayout,
    first: int,
    last_allowed: int,
    n_words: int,
    cfg: WindowConfig,
) -> Window:
    """Choose the window that decides words ``first ..`` (at most ``last_allowed``).

    ``n_words`` words exist so far (their tokens may serve as right context).
    A word is decided here when it has ``cfg.right`` tokens after its label
    token inside the window, or when the window already reaches the last
    available token (no later window could give it more right context; the
    caller allows only words that must be decided now).
    """
    starts, ends, label_pos = layout.starts, layout.ends, layout.label_pos
    total = ends[n_words - 1]
    want = label_pos[first] - cfg.left
    if want <= 0:
        a_idx = 0
    else:
        a_idx = bisect.bisect_right(starts, want, 0, first + 1) - 1
    # The window must hold the whole first word.
    while a_idx < first and ends[first] - starts[a_idx] > cfg.size:
        a_idx += 1
    a = starts[a_idx]
    # Extend right to the last whole word that fits.
    b_idx = bisect.bisect_right(ends, a + cfg.size, first, n_words) - 1
    b_idx = max(b_idx, first)
    b = ends[b_idx]
    reaches_end = b == total
    last = first - 1
    for j in range(first, min(last_allowed, b_idx) + 1):
        if reaches_end or b - 1 - label_pos[j] >= cfg.right:
            last = j
        else:
            break
    if last < first:
        last = first  # geometry too tight for the required context: decide anyway
    return Window(a, b, first, last)


def plan_offline(layout: TokenLayout, cfg: WindowConfig) -> list[Window]:
    """The fixed grid of windows that decides every word of a complete text once."""
    n = len(layout)
    windows: list[Window] = []
    i = 0
    while i < n:
        w = select_window(layout, i, n - 1, n, cfg)
        windows.append(w)
        i = w.last_word + 1
    return windows


def pad_batch(seqs: Sequence[np.ndarray], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad token id sequences to the longest: ``(input_ids, attention_mask)``, int64."""
    if not seqs:
        raise ValueError("empty batch")
    t = max(len(s) for s in seqs)
    ids = np.full((len(seqs), t), pad_id, dtype=np.int64)
    mask = np.zeros((len(seqs), t), dtype=np.int64)
    for k, s in enumerate(seqs):
        ids[k, : len(s)] = s
        mask[k, : len(s)] = 1
    return ids, mask


@dataclass(frozen=True)
class WindowBatch:
    """A text's offline windows as model inputs (what the offline decoder runs).

    Attributes:
        input_ids, attention_mask: int64[N, T], ``[CLS] tokens [SEP]`` rows
            right-padded to the longest with the pad id / 0.
        positions: int64[n_words, 2], in word order: (row, column) of the
            token that carries each word's label in the window that decides it.
    """

    input_ids: np.ndarray
    attention_mask: np.ndarray
    positions: np.ndarray


def offline_windows(
    word_ids: Sequence[Sequence[int]],
    cfg: WindowConfig,
    *,
    label_position: str,
    cls_id: int,
    sep_id: int,
    pad_id: int,
) -> WindowBatch:
    """The :func:`plan_offline` grid over words given as sub-token ids, framed and padded."""
    if not word_ids:
        raise ValueError("no words")
    layout = TokenLayout.from_counts([len(w) for w in word_ids], label_position)
    ids = np.fromiter((t for w in word_ids for t in w), dtype=np.int64)
    windows = plan_offline(layout, cfg)
    seqs = [np.concatenate(([cls_id], ids[w.token_start:w.token_end], [sep_id])) for w in windows]
    input_ids, mask = pad_batch(seqs, pad_id)
    positions = np.empty((len(layout), 2), dtype=np.int64)
    label_pos = np.asarray(layout.label_pos, dtype=np.int64)
    for row, w in enumerate(windows):
        decided = slice(w.first_word, w.last_word + 1)
        positions[decided, 0] = row
        positions[decided, 1] = label_pos[decided] - w.token_start + 1
    return WindowBatch(input_ids, mask, positions)
