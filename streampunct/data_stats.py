"""Label counts of the data sets (``python -m streampunct.data_stats [DATA_ROOT]``)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

from streampunct.convert import text_to_word_labels
from streampunct.data import iter_ted_talks, read_word_labels
from streampunct.labels import LABELS


def _row(name: str, labels) -> str:
    c = collections.Counter(labels)
    return f"{name}: words={len(labels)} " + " ".join(f"{LABELS[k]}={c[k]}" for k in range(4))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(__file__).resolve().parents[2] / "shared" / "data"
    ted = root / "ted_talks" / "ted.jsonl.gz"
    if ted.is_file():
        labels: list[int] = []
        for _, text in iter_ted_talks(ted):
            labels += text_to_word_labels(text)[1]
        print(_row("ted_talks (converted)", labels))
    dev2010 = root / "cased_spoken" / "ted_iwslt_dev2010_cased.txt"
    if dev2010.is_file():
        print(_row("dev2010 (converted)", text_to_word_labels(dev2010.read_text(encoding="utf-8"))[1]))
    for name in ("dev2012", "test2011", "test2011asr"):
        path = root / "iwslt2011_che" / name
        if path.is_file():
            data = read_word_labels(path)
            print(_row(f"{name} (read, {data.folded} lines folded)", data.labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
