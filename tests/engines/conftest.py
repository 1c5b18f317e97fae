"""Tiny models and data for the engine tests.

The tiny tagger is a 2-layer BERT (hidden 32) with a linear head, trained for
a second on a synthetic rule (each word has a fixed label) so that its logits
have real margins: label agreement after fp16/int8 conversion then measures
the conversion, not ties between random logits.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
DATA_ROOT = Path(os.environ.get("STREAMPUNCT_DATA", REPO.parent / "shared" / "data"))
DEV2012 = DATA_ROOT / "iwslt2011_che" / "dev2012"
LABELS = ["O", "COMMA", "PERIOD", "QUESTION"]
METADATA = {
    "labels": LABELS,
    "label_position": "last",
    "window": {"size": 126, "left": 40, "right": 20},
}
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
WORDS = [f"w{i}" for i in range(60)]
PIECES = [f"##p{i}" for i in range(20)]
VOCAB = SPECIALS + WORDS + PIECES  # 84 ids, below the tiny model's 100


def word_label(word: str) -> int:
    """The synthetic rule: a word's label is fixed by its number."""
    n = int(word[1:].split("#")[0]) if word[1:].isdigit() else 0
    return 0 if n % 5 else (1 + (n // 5) % 3)


def make_tiny_module(seed: int = 0, *, train_steps: int = 60):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

    class TinyTagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            config = transformers.BertConfig(
                vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                intermediate_size=64, max_position_embeddings=512,
            )
            self.encoder = transformers.BertModel(config, add_pooling_layer=False)
            self.head = torch.nn.Linear(32, len(LABELS))

        def forward(self, input_ids, attention_mask):
            hidden = self.encoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=torch.zeros_like(input_ids),
            ).last_hidden_state
            return self.head(hidden)

    # Tiny tensors: one thread is fastest, and it avoids OpenMP spin-wait contention,
    # which makes multi-threaded torch 100x slower on a loaded shared CPU.
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    module = TinyTagger()
    if train_steps:
        rng = np.random.default_rng(seed)
        label_of = torch.tensor([word_label(t) if t.startswith("w") else 0 for t in VOCAB] + [0] * 16)
        opt = torch.optim.AdamW(module.parameters(), lr=3e-3)
        module.train()
        for _ in range(train_steps):
            ids = torch.from_numpy(rng.integers(4, len(VOCAB), size=(16, 24)))
            mask = torch.ones_like(ids)
            loss = torch.nn.functional.cross_entropy(
                module(ids, mask).reshape(-1, len(LABELS)), label_of[ids].reshape(-1)
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
    return module.eval()


def write_tiny_tokenizer(path: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, normalizers, pre_tokenizers, processors

    vocab = {token: i for i, token in enumerate(VOCAB)}
    tok = tokenizers.Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.BertProcessing(("[SEP]", 3), ("[CLS]", 2))
    tok.save(str(path))
    return path


def write_word_labels(path: Path, n_words: int = 600, seed: int = 0) -> Path:
    """``word<TAB>LABEL`` lines following the synthetic rule (some words split into pieces)."""
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(n_words):
        word = WORDS[int(rng.integers(len(WORDS)))]
        label = LABELS[word_label(word)]
        if rng.random() < 0.1:
            word = word + "p3"  # WordPiece: w1p3 -> [UNK] or pieces; exercises multi-token words
        lines.append(f"{word}\t{label}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_module():
    return make_tiny_module()


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory, tiny_module):
    """Export of the tiny tagger: a model folder with model.onnx, its sidecar and tokenizer."""
    from engines.build.onnx_export import export_onnx

    folder = tmp_path_factory.mktemp("tiny_model")
    result = export_onnx(tiny_module, folder / "model.onnx")
    write_tiny_tokenizer(folder / "tokenizer.json")
    (folder / "streampunct.json").write_text(json.dumps({**METADATA, "encoder": "tiny-bert"}))
    return result


@pytest.fixture(scope="session")
def tiny_words(tmp_path_factory) -> Path:
    return write_word_labels(tmp_path_factory.mktemp("data") / "words.tsv")


def parity_windows(words_path: Path, tokenizer_path: Path, size: int = 62, left: int = 10, right: int = 10):
    """Validation-style windows built with the runtime's reader, aligner and windowing."""
    from engines.build.parity import ParityWindows
    from streampunct.core.alignment import Aligner
    from streampunct.core.windowing import WindowConfig
    from streampunct.text.word_labels import read_word_labels

    aligner = Aligner.from_file(tokenizer_path)
    words = read_word_labels(words_path).words
    return ParityWindows.of(aligner.offline_windows(words, WindowConfig(size, left, right)))


@pytest.fixture(scope="session")
def tiny_windows(tiny_export, tiny_words):
    return parity_windows(tiny_words, tiny_export.path.parent / "tokenizer.json")


def tiny_two_head_model(folder: Path, config, seed: int = 0):
    """A random-init ``PunctuationModel`` with punctuation and case heads on the Hugging
    Face ``config`` (saved into ``folder``), no dropout, in eval mode."""
    import torch

    from training.model import build_model

    config.save_pretrained(folder)
    torch.manual_seed(seed)
    return build_model(folder, random_init=True, dropout=0.0, case_head=True).eval()


def tiny_bert_config():
    """The Hugging Face config of the benches' tiny two-head models: 2 layers of width 16,
    a 120-word vocabulary, 64 positions."""
    from transformers import BertConfig

    return BertConfig(vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=64)
