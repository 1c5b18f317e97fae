"""How densely runtime models punctuate real ASR output, without labels: marks per 100 words on
TEDx automatic captions held out from every training draw, next to TED dev2010 (reference text,
gold density known).

The validation sets are reference transcripts; a model that learns to leave ASR-looking text
unpunctuated does not show there. Talks have about the same density of sentences and clauses
whether a person or a recognizer wrote them down, so a model whose rate on the captions falls
far below its rate on dev2010 under-punctuates ASR output. Never reads a test set.

    python -m benchmarks.mark_rate models/default build/v6 [--words 100000] [--json OUT.json]

Each model is a runtime model folder, decoded as the service decodes it, or a training
checkpoint (``checkpoints/.../best``), decoded in torch with its own window: the teacher
before any export.

Held-out captions: the TEDx talks outside the 400k-word draw that the release students trained on
(``training.data.load_unlabeled(["tedx"], max_words=400000, seed=15)``), a seeded sample of
``--words`` words.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks.common import prepare_out_file, run_module, write_result
from streampunct.labels import LABELS
from streampunct.labels import mark_rates as rates
from training.data import CAPTION_TRAINING_DRAW, HELD_OUT_CAPTION_WORDS
from training.data import held_out_captions as _held_out_captions

TRAINING_DRAW = dict(CAPTION_TRAINING_DRAW)


def held_out_captions(root: Path, words: int, seed: int = 7):
    """Caption talks outside the students' training draw, a seeded sample of about ``words`` words
    (``training.data.held_out_captions``; caption draws for training leave them out)."""
    return _held_out_captions(root, words, seed, training_draw=TRAINING_DRAW)


def model_labels(model: Path, *doc_sets) -> list[np.ndarray]:
    """Argmax punctuation labels of each set of documents, for a runtime folder or a checkpoint."""
    from training.distill import teacher_decoder

    decode, _ = teacher_decoder(model, device="cpu")
    return [np.concatenate([lg[:, :len(LABELS)].argmax(-1) for lg in decode(docs)]) for docs in doc_sets]


def main(argv: Sequence[str] | None = None) -> int:
    from streampunct.commands.argtypes import positive_int
    from training.data import data_root, load_validation_docs, resolve_cache

    ap = argparse.ArgumentParser(prog="python -m benchmarks.mark_rate", description=__doc__.split("\n")[0])
    ap.add_argument("models", type=Path, nargs="+", help="runtime model folders or training checkpoints")
    ap.add_argument("--words", type=positive_int, default=HELD_OUT_CAPTION_WORDS,
                    help=f"held-out caption words (default {HELD_OUT_CAPTION_WORDS}; caption draws for "
                         "training leave out exactly this default sample)")
    ap.add_argument("--data-root", default="", help="data folder (default: $STREAMPUNCT_DATA or ../shared/data)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.json:
        prepare_out_file(args.json.with_name(args.json.stem + ".json"), ap)  # where write_result puts it

    root = data_root(args.data_root)
    captions = held_out_captions(root, args.words)
    if not captions:
        ap.error(f"no TEDx caption talk in {root} is held out from the training draw: it holds fewer "
                 "than two caption talks (unlabeled/tedx); a data folder with more caption text is needed")
    dev = load_validation_docs("dev2010", root, resolve_cache("cache"))
    gold = np.asarray([x for d in dev for x in d.labels], dtype=np.int64)
    result: dict = {"captions_words": sum(map(len, captions)), "dev2010_gold": rates(gold), "models": {}}
    print(f"dev2010 gold: {result['dev2010_gold']['marks_per_100_words']} marks per 100 words")
    for folder in args.models:
        cap, ref = model_labels(folder, captions, dev)
        r = {"tedx_held_out": rates(cap), "dev2010": rates(ref)}
        r["ratio_captions_to_dev2010"] = round(r["tedx_held_out"]["marks_per_100_words"]
                                               / max(r["dev2010"]["marks_per_100_words"], 1e-9), 3)
        result["models"][str(folder)] = r
        print(f"{folder}: captions {r['tedx_held_out']['marks_per_100_words']}, dev2010 "
              f"{r['dev2010']['marks_per_100_words']} marks per 100 words (ratio {r['ratio_captions_to_dev2010']})")
    if args.json:
        path = write_result(args.json.stem, result, args.json.parent, command="python -m benchmarks.mark_rate " +
                            " ".join(sys.argv[1:] if argv is None else argv))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_module(main, "python -m benchmarks.mark_rate"))
