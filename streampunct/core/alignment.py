"""Sub-word alignment shared by training, offline decoding and streaming.

Each word is tokenized on its own (WordPiece and BPE pre-tokenizers split on
whitespace, so this equals tokenizing the sentence) and cached (an LRU cache of
``word_cache_size`` words; see docs/server.md, "Memory"). A word's label
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

from streampunct.core.windowing import WindowBatch, WindowConfig, offline_windows
from streampunct.errors import ModelError

LabelPosition = Literal["last", "first"]
_SPECIALS = {"cls": ("[CLS]", "<s>"), "sep": ("[SEP]", "</s>"), "pad": ("[PAD]", "<pad>")}
_UNK = ("[UNK]", "<unk>")
#: Words whose sub-token ids an aligner keeps by default (training and offline decoding; the
#: server sets its own bound, ``ServerConfig.word_cache_words``).
WORD_CACHE_SIZE = 200_000


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
        word_cache_size: words whose ids are kept (least recently used ones go).
        cls_id, sep_id, pad_id: the special tokens framing every model input.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        label_position: LabelPosition = "last",
        max_word_tokens: int = 16,
        word_cache_size: int = WORD_CACHE_SIZE,
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
        # One int object per vocabulary id, shared by every cached word: a cached word then costs its
        # string, a tuple of pointers and the LRU node (about 130 + 8 x tokens bytes), not 28 more
        # bytes per token for ids above 256 (CPython caches only the small ints).
        self._id_objects = list(range(tokenizer.get_vocab_size(with_added_tokens=True)))
        self.set_word_cache_size(word_cache_size)

    @property
    def word_cache_size(self) -> int:
        return self._word_cache_size

    def set_word_cache_size(self, size: int) -> None:
        """Keep the ids of at most ``size`` words (the cache starts empty again)."""
        if size < 0:
            raise ValueError("word_cache_size must be >= 0")
        self._word_cache_size = size
        self._word_ids = lru_cache(maxsize=size)(self._encode_word)

    @classmethod
    def from_file(cls, path: str | Path, **kwargs) -> Aligner:
        path = Path(path)
        if path.is_dir() and path.name != "tokenizer.json":  # a model folder
            path = path / "tokenizer.json"
        if not path.is_file():
            what = ("is a folder, not a file" if path.is_dir() else "is a link to nothing" if path.is_symlink()
                    else "does not exist")
            raise ModelError(f"no tokenizer at {path}: it {what} (expected a Hugging Face tokenizer.json)")
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as e:  # the tokenizers library raises a bare Exception for a malformed file
            raise ModelError(f"cannot read the tokenizer {path}: {e}") from e
        return cls(tokenizer, **kwargs)

    def _encode_word(self, word: str) -> tuple[int, ...]:
        ids = self.tokenizer.encode(word, add_special_tokens=False).ids
        if not ids:
            return (self.unk_id,)
        if len(ids) > self.max_word_tokens:
            ids = ids[: self.max_word_tokens - 1] + ids[-1:]
        shared = self._id_objects
        return tuple(shared[i] if i < len(shared) else i for i in ids)

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
