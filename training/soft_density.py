"""How densely a teacher's soft labels punctuate each source, and a gate that leaves a source out
of a student's data when the teacher under-punctuates it.

The release 6 student (docs/history.md, release 6) learned to leave ASR text unpunctuated:
its teacher's labels on the TEDx captions were what it copied. The captions have no human
labels, but talks have about the same density of sentences and clauses whether a person or a
recognizer wrote them down, so the teacher's marks per 100 caption words should be close to its
marks per 100 words of TED reference text. ``benchmarks.mark_rate`` checks runtime models this
way; this module checks a soft-label file (``training.distill``) before a student trains on it:

    python -m training.soft_density soft.npz [--check tedx --reference ted]
        [--min-ratio 0.95 --out kept.npz] [--json density.json]

With ``--min-ratio`` and ``--out``, ``kept.npz`` is the file without the ``--check`` source's
documents when the ratio (check / reference, the teacher's argmax marks per 100 words) is below
the bound, and a copy of it otherwise; the decision is printed and written to the JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from streampunct.errors import InputError
from streampunct.labels import LABELS
from training.cli_support import run_tool
from training.distill import _lines, _utf8, load_soft_label_arrays, unlabeled_only_sources


def _source(name: str) -> str:
    """A document's source: its name up to the first colon (``ted:1234`` -> ``ted``)."""
    return name.split(":", 1)[0]


def _per_100(labels: np.ndarray) -> float:
    return round(100.0 * float(np.count_nonzero(labels > 0)) / max(len(labels), 1), 2)


def density(arrays: dict[str, np.ndarray]) -> dict[str, dict]:
    """Per source: words, the teacher's marks per 100 words (argmax of the punctuation
    probabilities) and, where the words have human labels, the gold marks per 100 words."""
    names = _lines(arrays["names"])
    lengths = arrays["lengths"].astype(np.int64)
    teacher = arrays["probs"][:, : len(LABELS)].astype(np.float32).argmax(-1)
    human = arrays["labels"].astype(np.int64)
    unlabeled_only = unlabeled_only_sources(json.loads(arrays["meta"].tobytes().decode("utf-8")))
    ends = np.cumsum(lengths)
    by_source: dict[str, list[np.ndarray]] = {}
    for name, end, n in zip(names, ends, lengths, strict=True):
        by_source.setdefault(_source(name), []).append(np.arange(end - n, end))
    out = {}
    for source, parts in sorted(by_source.items()):
        idx = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        known = human[idx][human[idx] >= 0] if source not in unlabeled_only else np.zeros(0, np.int64)
        out[source] = {
            "documents": len(parts), "words": int(idx.size),
            "teacher_marks_per_100_words": _per_100(teacher[idx]),
            "gold_marks_per_100_words": _per_100(known) if known.size == idx.size and idx.size else None,
        }
    return out


def drop_source(arrays: dict[str, np.ndarray], source: str) -> dict[str, np.ndarray]:
    """The same file's arrays without the documents of ``source``; meta records the drop."""
    names, texts = _lines(arrays["names"]), _lines(arrays["text"])
    lengths = arrays["lengths"].astype(np.int64)
    keep_doc = np.asarray([_source(n) != source for n in names], dtype=bool)
    keep_word = np.repeat(keep_doc, lengths)
    meta = json.loads(arrays["meta"].tobytes().decode("utf-8"))
    meta["dropped_sources"] = [*meta.get("dropped_sources", []), source]
    meta["words"] = int(lengths[keep_doc].sum())
    return {
        "probs": arrays["probs"][keep_word], "labels": arrays["labels"][keep_word],
        "case": arrays["case"][keep_word], "lengths": lengths[keep_doc],
        "text": _utf8([t for t, k in zip(texts, keep_doc, strict=True) if k]),
        "names": _utf8([n for n, k in zip(names, keep_doc, strict=True) if k]),
        "meta": _utf8([json.dumps(meta)]),
    }


def gate(path: Path, *, check: str = "tedx", reference: str = "ted", min_ratio: float | None = None,
         out: Path | None = None) -> dict:
    """The density report of ``path``; with ``min_ratio`` and ``out``, ``out`` written as the file
    without ``check``'s documents when check / reference falls below ``min_ratio`` (else a copy)."""
    if (min_ratio is None) != (out is None):
        raise InputError("--min-ratio and --out go together")
    arrays = load_soft_label_arrays(path)
    per_source = density(arrays)
    for s in (check, reference):
        if s not in per_source:
            raise InputError(f"{path} has no documents of source {s!r} (it has {', '.join(per_source) or 'none'})")
    ref = per_source[reference]["teacher_marks_per_100_words"]
    ratio = round(per_source[check]["teacher_marks_per_100_words"] / ref, 3) if ref > 0 else 0.0
    report = {"file": str(path), "sources": per_source, "check": check, "reference": reference, "ratio": ratio}
    if min_ratio is not None and out is not None:
        dropped = ratio < min_ratio
        report.update(min_ratio=min_ratio, dropped=dropped, out=str(out))
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp.npz")
        if dropped:
            np.savez_compressed(tmp, **drop_source(arrays, check))
        else:
            shutil.copyfile(path, tmp)
        tmp.replace(out)
    return report


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.soft_density", description=__doc__.split("\n")[0])
    ap.add_argument("soft_labels", type=Path, help="a training.distill soft-label file (.npz)")
    ap.add_argument("--check", default="tedx", help="the source to check (default tedx: the ASR captions)")
    ap.add_argument("--reference", default="ted", help="the source it is compared with (default ted)")
    ap.add_argument("--min-ratio", type=float, default=None,
                    help="leave --check out of --out when its density / the reference's is below this")
    ap.add_argument("--out", type=Path, default=None, help="the gated file (with --min-ratio)")
    ap.add_argument("--json", type=Path, default=None, help="write the report here")
    args = ap.parse_args(argv)

    def run() -> None:
        report = gate(args.soft_labels, check=args.check, reference=args.reference,
                      min_ratio=args.min_ratio, out=args.out)
        for source, r in report["sources"].items():
            gold = r["gold_marks_per_100_words"]
            print(f"{source}: {r['words']} words, teacher {r['teacher_marks_per_100_words']} marks per 100 words"
                  + (f" (gold {gold})" if gold is not None else " (no human labels)"))
        print(f"ratio {args.check} / {args.reference}: {report['ratio']}")
        if "dropped" in report:
            print(f"{'left out' if report['dropped'] else 'kept'} {args.check} "
                  f"(bound {args.min_ratio}): wrote {args.out}")
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")

    return run_tool(run)


if __name__ == "__main__":
    raise SystemExit(main())
