"""Write data/iwslt2011/test2011_cased.txt: the cased, punctuated reference transcripts of
IWSLT tst2011 (the talks of test2011), one segment a line, a blank line between talks, from
the original distribution's XML. Used only to score truecasing (evaluation only).

    python scripts/make_test2011_cased.py [../shared/data/iwslt2011_che/original_distribution/IWSLT12.TED.MT.tst2011.en-fr.en.xml]
"""

import html
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
src = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT.parent / "shared" / "data" / "iwslt2011_che" /
           "original_distribution" / "IWSLT12.TED.MT.tst2011.en-fr.en.xml")
xml = src.read_text(encoding="utf-8")
talks = []
for m in re.finditer(r'<doc docid="(\d+)"(.*?)</doc>', xml, flags=re.S):
    segs = re.findall(r'<seg id="\d+">(.*?)</seg>', m.group(2), flags=re.S)
    talks.append("\n".join(html.unescape(" ".join(s.split())) for s in segs))
out = ROOT / "data" / "iwslt2011" / "test2011_cased.txt"
out.write_text("\n\n".join(talks) + "\n", encoding="utf-8")
print(f"{out}: {len(talks)} talks, {sum(len(t.split()) for t in talks)} tokens")
