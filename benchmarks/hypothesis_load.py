"""Live caption sessions that send interim hypotheses, against a running server (partials on).

Each session speaks dev2010 text at 2.5 words/s in 1-4-word chunks; before each commit it
sends two interim results (the chunk's first word 200 ms before, the whole chunk 100 ms
before), as a streaming ASR does. Prints, as JSON, the p95 "margin after decidable" (the
client's view: from the moment a word could be final to its final) over the sessions.

    python -m benchmarks.hypothesis_load ws://127.0.0.1:8765/v1/stream 100 30
"""

from __future__ import annotations

import asyncio
import json
import random
import sys

import numpy as np

from streampunct.caption import caption
from streampunct.caption_input import AsrEvent
from streampunct.convert import text_to_word_labels
from streampunct.protocol import Word

DEV = "../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt"


def events(text: list[str], seed: int, duration: float) -> list[AsrEvent]:
    rng = random.Random(seed)
    i = rng.randrange(0, len(text) - 200)
    out, t = [], 1.0
    while t < duration:
        k = rng.randint(1, 4)
        chunk = text[i : i + k]
        i, t = i + k, t + k / 2.5
        out.append(AsrEvent(t - 0.2, tuple(Word(w) for w in chunk[:1]), interim=True))
        out.append(AsrEvent(t - 0.1, tuple(Word(w) for w in chunk), interim=True))
        out.append(AsrEvent(t, tuple(Word(w) for w in chunk)))
    return out


async def main(url: str, sessions: int, duration: float) -> None:
    words, _ = text_to_word_labels(open(DEV, encoding="utf-8").read())
    runs = await asyncio.gather(*(
        caption(url, events=events(words, s, duration), right_context=3, max_delay_ms=2000, partials=True)
        for s in range(sessions)
    ))
    p95 = np.array([r.latency.margin[1] for r in runs])
    print(json.dumps({
        "sessions": sessions, "duration_s": duration,
        "words_final": sum(r.transcript.n_final for r in runs),
        "errors": sum(len(r.transcript.errors) for r in runs),
        "p95_margin_ms_median_over_sessions": round(float(np.median(p95)), 1),
        "p95_margin_ms_worst_session": round(float(p95.max()), 1),
    }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
