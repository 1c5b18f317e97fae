"""Word-level noise for training text: disfluencies and ASR errors.

Live captions of calls and talks are not clean TED text: speakers say
``uh``/``um``, repeat words and restart phrases, and recognisers substitute,
drop, insert, split and merge words. ``augment(doc, rng, cfg)`` rewrites a
labelled document that way, keeping every label where the audio would keep
it:

* **fillers** (``uh``, ``um``, ``you know``, ...) are inserted after a word
  and set off by commas, as conversational transcripts write them (SwDA:
  ``it's, uh, i think``; 63% of ``uh``, 87% of ``um`` and 82% of ``you
  know`` there are followed by a comma): the filler's last word takes COMMA,
  and the word before takes COMMA unless it has a mark of its own;
* **repetitions** (``i, i went``) and **restarts** (``to the, to the
  store``) repeat one to three words; the abandoned first copy loses its
  marks except a COMMA on its last word (``it, it, it could``);
* **ASR errors** (Alam et al. 2020: rate 0.15, substitution 0.4, deletion
  0.4, insertion 0.2): a substituted word takes a word drawn from the
  document and keeps the label; a deleted word passes a sentence or comma
  mark on to the word before it (the pause is still in the audio); an
  inserted word takes O;
* **split/merge**: ``something`` -> ``some thing`` (the mark moves to the
  second piece), ``in to`` -> ``into`` (the merged word takes the second
  word's mark).

Words that noise creates get no case label and no teacher soft label
(``IGNORE`` / not soft-labelled), so only real words teach those heads, with
one exception for case: noise that lands at a sentence start (a filler or an
inserted word after a sentence mark, the first copy of a repeated
sentence-initial word) starts the sentence, so it takes the capital
(``Um, then ...``), and the real word after it loses a Capitalized label
(``IGNORE``: a name keeps its capital there, other words do not).
Everything is drawn from the ``numpy.random.Generator`` passed in, so an epoch
seeded by ``(seed, epoch)`` augments the same way when a run is resumed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streampunct.labels import CAPITALIZED, COMMA, PERIOD, QUESTION, O

IGNORE = -100
FILLERS: tuple[tuple[str, ...], ...] = (
    ("uh",), ("um",), ("uh",), ("um",), ("uh",), ("um",), ("you", "know"), ("i", "mean"), ("like",),
    ("uh-huh",), ("well",), ("so",),
)


@dataclass(frozen=True)
class NoiseConfig:
    """How much noise ``augment`` adds (all rates per word; 0 turns a kind off).

    Attributes:
        share: fraction of documents (per epoch) that get noise at all.
        asr_rate: ASR errors per word; an error is a substitution, deletion or
            insertion with the three weights below (Alam et al.: 0.15, 0.4/0.4/0.2).
        substitute, delete, insert: relative weights of the three ASR error kinds.
        filler: fillers inserted per word.
        repeat: repetitions of one word, per word.
        restart: restarts (2-3 words repeated), per word.
        split_merge: split or merge errors per word.
    """

    share: float = 0.0
    asr_rate: float = 0.15
    substitute: float = 0.4
    delete: float = 0.4
    insert: float = 0.2
    filler: float = 0.03
    repeat: float = 0.01
    restart: float = 0.01
    split_merge: float = 0.01

    @property
    def enabled(self) -> bool:
        return self.share > 0

    def validate(self) -> None:
        from streampunct.errors import InputError

        for name in ("share", "asr_rate", "filler", "repeat", "restart", "split_merge"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise InputError(f"data.noise.{name} must be in [0, 1]")
        if min(self.substitute, self.delete, self.insert) < 0 or \
                self.substitute + self.delete + self.insert <= 0:
            raise InputError("data.noise.substitute/delete/insert must be >= 0 with a positive sum")


def augment(words: list[str], labels: list[int], case: list[int] | None, soft: np.ndarray | None,
            rng: np.random.Generator, cfg: NoiseConfig
            ) -> tuple[list[str], list[int], list[int] | None, np.ndarray | None]:
    """A noisy copy of one document: ``(words, labels, case, soft)``.

    ``case`` (case classes) and ``soft`` (teacher probabilities [n, C]) may be
    None; new words get ``IGNORE`` case and no soft label (rows of NaN).
    """
    n = len(words)
    if n == 0:
        return words, labels, case, soft
    w = cfg.substitute + cfg.delete + cfg.insert
    p_sub, p_del = cfg.asr_rate * cfg.substitute / w, cfg.asr_rate * cfg.delete / w
    p_ins = cfg.asr_rate * cfg.insert / w
    # One draw per word and kind, vectorised; the rewrite below is a single pass.
    u = rng.random((n, 7))
    pool = rng.integers(0, n, size=n)  # substitutes / insertions drawn from the document itself
    filler_pick = rng.integers(0, len(FILLERS), size=n)
    span = rng.integers(2, 4, size=n)
    cut = rng.random(n)
    out_w: list[str] = []
    out_l: list[int] = []
    out_c: list[int] = []
    out_s: list[int] = []  # index into soft, or -1

    def emit(word: str, label: int, c: int, s: int) -> None:
        out_w.append(word)
        out_l.append(label)
        out_c.append(c)
        out_s.append(s)

    def at_sentence_start() -> bool:
        return not out_l or out_l[-1] in (PERIOD, QUESTION)

    # case of noise that starts a sentence (no case labels: stays IGNORE)
    starter = CAPITALIZED if case is not None else IGNORE
    demote = False  # noise started the sentence: the next real word is no longer its first
    i = 0
    while i < n:
        word, label = words[i], labels[i]
        c = case[i] if case is not None else IGNORE
        if demote and c == CAPITALIZED:
            c = IGNORE  # "Um, then" / "Um, John": which, the text cannot say
        demote = False
        r = u[i]
        if r[0] < p_del:
            if label != O and out_l and out_l[-1] == O:
                out_l[-1] = label  # the pause stays in the audio
            i += 1
            continue
        if r[1] < cfg.repeat:
            if at_sentence_start() and c == CAPITALIZED:  # "The, the store"
                emit(word, COMMA, CAPITALIZED, -1)
                c = IGNORE
            else:
                emit(word, COMMA, IGNORE, -1)  # "i, i went"
        elif r[2] < cfg.restart and out_w:
            # "to the, to the store": the abandoned first try loses its marks but a comma.
            start = max(0, len(out_w) - (int(span[i]) - 1))
            copies = list(zip(out_w[start:], out_l[start:], strict=True))
            out_l[start:] = [O] * (len(copies) - 1) + [COMMA]
            for rw, rl in copies:
                emit(rw, rl, IGNORE, -1)
        if r[3] < p_sub:
            word, c, s = words[int(pool[i])], IGNORE, -1
        else:
            s = i
        if r[4] < cfg.split_merge:
            if len(word) >= 4 and cut[i] < 0.5:
                k = 1 + int(cut[i] * 2 * (len(word) - 1)) % (len(word) - 1)
                emit(word[:k], O, IGNORE, -1)
                emit(word[k:], label, IGNORE, -1)
                i += 1
                continue
            if label == O and i + 1 < n:
                emit(word + words[i + 1], labels[i + 1], IGNORE, -1)
                i += 2
                continue
        if r[5] < cfg.filler:
            # "it's, uh, i think": commas around the filler; a sentence mark stays.
            emit(word, COMMA if label == O else label, c, s if label != O else -1)  # (teacher said no comma)
            filler = FILLERS[int(filler_pick[i])]
            first = at_sentence_start()  # "milk. Um, then"
            for k, fw in enumerate(filler):
                emit(fw, COMMA if k == len(filler) - 1 else O, starter if first and k == 0 else IGNORE, -1)
            demote = demote or first
        else:
            emit(word, label, c, s)
        if r[6] < p_ins:
            first = at_sentence_start()
            emit(words[int(pool[(i + 1) % n])], O, starter if first else IGNORE, -1)
            demote = demote or first
        i += 1
    new_case = out_c if case is not None else None
    new_soft = None
    if soft is not None:
        idx = np.asarray(out_s, dtype=np.int64)
        new_soft = np.full((len(idx), soft.shape[1]), np.nan, dtype=np.float32)
        keep = idx >= 0
        new_soft[keep] = soft[idx[keep]]
    return out_w, out_l, new_case, new_soft
