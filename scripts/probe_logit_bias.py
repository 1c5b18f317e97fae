"""Would a per-class logit bias help? A validation-only probe (dev2010, SwDA validation).

Collects a model's per-word logits offline and the decided rows of a live
stream at the server's defaults (the schedule of ``evaluate --live``), then
adds a bias b to the COMMA / PERIOD / QUESTION logits and scores every b of a
grid. Windows never depend on labels, so one engine pass serves every b.

    .venv/bin/python scripts/probe_logit_bias.py [MODEL_DIR]

Result for release 5 (docs/training.md, "A logit bias for streaming,
probed"): the b that helps the live dev2010 stream costs SwDA validation
more; dropped.
"""

from __future__ import annotations

import itertools
import sys

import numpy as np

from streampunct.data import read_punctuated_text
from streampunct.evaluation import _alone, _play, live_schedule
from streampunct.options import SessionOptions
from streampunct.punctuator import Punctuator, decode_offline
from streampunct.stream_state import StreamState

SETS = {
    "dev2010": "../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt",
    "swda_val": "../shared/data/cased_spoken/swda_val_cased.txt",
}


def live_rows(punct: Punctuator, words: list[str]) -> np.ndarray:
    """float32[n_words, 4]: the punctuation logits each word was decided with, live."""
    rows: dict[int, np.ndarray] = {}
    alone = _alone(punct.engine.infer)

    def serve(request):
        logits = alone(request)
        if not request.partial:
            for k, row in enumerate(logits[request.positions][:, :4]):
                rows.setdefault(request.first_word + k, row)
        return logits

    labels: list[int] = []
    state = StreamState(punct.aligner, punct.stream_window, SessionOptions())
    _play(state, live_schedule(words), serve, lambda decisions: labels.extend(d.label for d in decisions))
    live = np.stack([rows[i] for i in range(len(words))])
    assert (live.argmax(-1) == np.asarray(labels)).all()
    return live


def f1(gold: np.ndarray, pred: np.ndarray) -> float:
    """Overall micro F1 over the three marks (the project's scorer, vectorized)."""
    tp = np.sum((pred == gold) & (gold > 0))
    fp = np.sum((pred > 0) & (pred != gold))
    fn = np.sum((gold > 0) & (pred != gold))
    return float(200 * tp / (2 * tp + fp + fn))


def main() -> None:
    punct = Punctuator.from_model_dir(sys.argv[1] if len(sys.argv) > 1 else None)
    gold, offline, live = {}, {}, {}
    for name, path in SETS.items():
        data = read_punctuated_text(path)
        gold[name] = np.asarray(data.labels)
        offline[name] = decode_offline(data.words, punct.aligner, punct.window, punct.engine.infer)[:, :4]
        live[name] = live_rows(punct, data.words)
    grid = np.round(np.arange(-0.5, 1.51, 0.1), 2)
    scored = []
    for bias in itertools.product(grid, grid, grid):
        b = np.array([0.0, *bias], dtype=np.float32)
        scored.append((f1(gold["dev2010"], (live["dev2010"] + b).argmax(-1)),
                       f1(gold["swda_val"], (live["swda_val"] + b).argmax(-1)),
                       f1(gold["dev2010"], (offline["dev2010"] + b).argmax(-1)), *bias))
    for row in [next(s for s in scored if s[3:] == (0, 0, 0)), *sorted(scored, reverse=True)[:5]]:
        print(f"b=({row[3]:.1f}, {row[4]:.1f}, {row[5]:.1f}): dev2010 live {row[0]:.2f}, "
              f"SwDA live {row[1]:.2f}, dev2010 offline {row[2]:.2f}")


if __name__ == "__main__":
    main()
