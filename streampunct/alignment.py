"""Sub-word alignment shared by training, offline decoding and streaming.

Each word is tokenized on its own (WordPiece and BPE pre-tokenizers split on
whitespace, so this equals tokenizing the sentence) and cached. A word's label
sits on one of its sub-tokens: the last by default (as in Chen et al. and
Huang et al.), the first as an option; the choice travels in the model
metadata so that training and inference agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Literal

from tokenizers import Tokenizer

from streampunct.errors import ModelError
from streampunct.windowing import WindowBatch, WindowConfig, offline_windows

LabelPosition = Literal["last", "first"]
_SPECIALS = {"cls": ("[CLS]", "<s>"), "sep": ("[SEP]", "</s>"), "pad": ("[PAD]", "<pad>")}
_UNK = ("[UNK]", "<unk>")


def _special_id(tokenizer: Tokenizer, names: tuple[str, ...], what: str) -> int:
    for name in names:
        token_id = tokenizer.token_to_id(name)
        if token_id is not None:
            return token_id
    raise ModelError(f"tokenizer has no {what} token (looked for {', '.join(names)})")


class Aligner:
    """Maps words to sub-token ids and says which sub-token carries the label.

    Attributes:
        label_position: ``"last"`` or ``"first"`` sub-token of each word.
        max_word_tokens: a word never takes more sub-tokens than this (very long
            words keep their first ``max_word_tokens - 1`` and their last one).
        cls_id, sep_id, pad_id: the special tokens framing every model input.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        label_position: LabelPosition = "last",
        max_word_tokens: int = 16,
    ) -> None:
        if label_position not in ("last", "first"):
            raise ValueError(f"label_position must be 'last' or 'first', not {label_position!r}")
        if max_word_tokens < 2:
            raise ValueError("max_word_tokens must be at least 2")
        # tokenizer.json files often carry padding/truncation settings (the
        # MiniLM one pads to 128); words must be encoded bare.
        tokenizer = Tokenizer.from_str(tokenizer.to_str())
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.tokenizer = tokenizer
        self.label_position: LabelPosition = label_position
        self.max_word_tokens = max_word_tokens
        self.cls_id = _special_id(tokenizer, _SPECIALS["cls"], "CLS/<s>")
        self.sep_id = _special_id(tokenizer, _SPECIALS["sep"], "SEP/</s>")
        self.pad_id = _special_id(tokenizer, _SPECIALS["pad"], "PAD/<pad>")
        self.unk_id = _special_id(tokenizer, _UNK, "UNK")
        self._word_ids = lru_cache(maxsize=200_000)(self._encode_word)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs) -> Aligner:
        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.is_file():
            raise ModelError(f"no tokenizer at {path} (expected a Hugging Face tokenizer.json)")
        return cls(Tokenizer.from_file(str(path)), **kwargs)

    def _encode_word(self, word: str) -> tuple[int, ...]:
        ids = self.tokenizer.encode(word, add_special_tokens=False).ids
        if not ids:
            return (self.unk_id,)
        if len(ids) > self.max_word_tokens:
            ids = ids[: self.max_word_tokens - 1] + ids[-1:]
        return tuple(ids)

    def word_ids(self, word: str) -> tuple[int, ...]:
        """Sub-token ids of one (normalized) word: never empty, at most max_word_tokens."""
        return self._word_ids(word)

    def label_offset(self, n_tokens: int) -> int:
        """Index, within a word's sub-tokens, of the token that carries its label."""
        return n_tokens - 1 if self.label_position == "last" else 0

    def encode_words(self, words: list[str]) -> tuple[list[int], list[int], list[int]]:
        """Token ids of a word sequence, each word's first token index and label token index."""
        ids: list[int] = []
        starts: list[int] = []
        label_pos: list[int] = []
        for word in words:
            wid = self.word_ids(word)
            starts.append(len(ids))
            label_pos.append(len(ids) + self.label_offset(len(wid)))
            ids.extend(wid)
        return ids, starts, label_pos

    def offline_windows(self, words: Sequence[str], cfg: WindowConfig) -> WindowBatch:
        """The offline decoder's windows over normalized ``words``, as padded arrays."""
        return offline_windows(
            [self.word_ids(w) for w in words], cfg, label_position=self.label_position,
            cls_id=self.cls_id, sep_id=self.sep_id, pad_id=self.pad_id,
        )
