"""Truecasing live vs offline, and whether a bias on the case head's 'lower' logit recovers
what live decisions lose. A validation-only probe (cased TED dev2010).

Plays dev2010 as one live stream at the server's defaults (the schedule of ``evaluate
--live``), takes each final's case class from the same window as its punctuation (as the
server does), and scores non-lower F1 with the punctuation rules that open sentences, next to
the offline decoder's. Then adds b to the 'lower' logit of every window and plays the stream
again for each b (the windows do not depend on the case classes, so their logits are cached).

    .venv/bin/python scripts/probe_live_case.py [MODEL_DIR] [--biases 0 -0.5 -1 -1.5 -2]

Result for release 6 (docs/training.md, "Truecasing live"): live 82.69 against 84.45
offline, nearly all recall; every bias toward non-lower scores lower (dropped).
"""

from __future__ import annotations

import argparse

import numpy as np

from streampunct.case_eval import case_report, rule_cases
from streampunct.convert import text_to_word_labels_cased
from streampunct.evaluation import _alone, _play, live_schedule
from streampunct.labels import LABELS
from streampunct.options import SessionOptions
from streampunct.punctuator import Punctuator
from streampunct.stream_state import StreamState

DEV2010 = "../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?", default="models/default")
    ap.add_argument("--biases", type=float, nargs="+", default=[0.0, -0.5, -1.0, -1.5, -2.0])
    args = ap.parse_args()
    p = Punctuator.from_model_dir(args.model)
    if not p.has_case:
        raise SystemExit(f"{args.model} has no truecasing head")
    words, _, gold_cases = text_to_word_labels_cased(open(DEV2010, encoding="utf-8").read())
    labels, cases = p.labels_and_cases(words)
    print(f"offline: non-lower {case_report(gold_cases, rule_cases(words, labels, cases))['non_lower']}")
    cache: dict[bytes, np.ndarray] = {}

    def infer(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        key = ids.tobytes()
        if key not in cache:
            cache[key] = np.asarray(p.infer_all(ids, mask), dtype=np.float32)
        return cache[key].copy()

    for b in args.biases:
        def biased(ids: np.ndarray, mask: np.ndarray, b: float = b) -> np.ndarray:
            out = infer(ids, mask)
            out[..., len(LABELS)] += b  # the case head's 'lower' logit
            return out

        state = StreamState(p.aligner, p.stream_window, SessionOptions())
        finals: list = []
        _play(state, live_schedule(words), _alone(biased), finals.extend)
        finals.sort(key=lambda d: d.index)
        live = case_report(gold_cases, rule_cases(words, [d.label for d in finals], [d.case for d in finals]))
        mixed = case_report(gold_cases, rule_cases(words, [d.label for d in finals], cases))
        print(f"live, lower bias {b:+.2f}: non-lower {live['non_lower']}"
              + (f" (offline case classes with the live punctuation: {mixed['non_lower']})" if b == 0 else ""))
    p.close()


if __name__ == "__main__":
    main()
