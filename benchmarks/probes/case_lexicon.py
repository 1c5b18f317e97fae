# One-off probe (issue 54, 2026-12-01): where the default's case errors are, and what a mid-sentence
# case lexicon from the TED training talks would gain. Run: python benchmarks/probes/case_lexicon.py \
#   ../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt
import gzip, json, re, sys, collections
import numpy as np
from streampunct.core.decoder import OfflineDecoder
from streampunct.text.convert import text_to_word_labels_cased
from streampunct.evaluation.case import rule_cases, _is_i, case_report
from streampunct.labels import LOWER, PERIOD, QUESTION
text = open(sys.argv[1]).read()
words, gl, gc = text_to_word_labels_cased(text)
p = OfflineDecoder.from_model_dir(None)
labels, cases = p.labels_and_cases(words)
shown = rule_cases(words, labels, cases)
# lexicon from TED training text: mid-sentence counts of cased forms
cnt = collections.defaultdict(collections.Counter)
n=0
with gzip.open('../shared/data/ted_talks/ted.jsonl.gz','rt') as f:
    for line in f:
        d=json.loads(line); t=d.get('text') or d.get('transcript') or ''
        w2,l2,c2 = text_to_word_labels_cased(t)
        prev_end=True
        for w,l,c in zip(w2,l2,c2):
            if not prev_end and c>=0: cnt[w][c]+=1
            prev_end = l in (PERIOD,QUESTION)
        n+=1
print('talks',n, file=sys.stderr)
def lex(w, thr=0.9, minc=3):
    c=cnt.get(w); 
    if not c: return None
    tot=sum(c.values()); 
    if tot<minc: return None
    k,v=c.most_common(1)[0]
    return k if v/tot>=thr else None
cat=collections.Counter(); ex=collections.defaultdict(collections.Counter)
for i,w in enumerate(words):
    g=gc[i]
    if g<0: continue
    gstart = i==0 or gl[i-1] in (PERIOD,QUESTION)
    pstart = i==0 or labels[i-1] in (PERIOD,QUESTION)
    gn, sn = g!=LOWER, shown[i]!=LOWER
    if gn==sn: continue
    key=('FN' if gn else 'FP')+('_gstart' if gstart else '')+('_pstart' if pstart else '')
    cat[key]+=1; ex[key][w]+=1
print(cat)
for k in ex: print(k, ex[k].most_common(25))
# lexicon override for mid-sentence (pstart False) words
for thr in (0.8,0.9,0.95):
  for mode in ('add','both'):
    new=list(shown)
    for i,w in enumerate(words):
        pstart = i==0 or labels[i-1] in (PERIOD,QUESTION)
        if pstart or _is_i(w): continue
        k=lex(w,thr)
        if k is None: continue
        if k!=LOWER and new[i]==LOWER: new[i]=k if k!=3 else 1
        elif mode=='both' and k==LOWER and new[i]!=LOWER: new[i]=LOWER
    print(thr, mode, case_report(gc,new)['non_lower'], 'base', case_report(gc,shown)['non_lower']['f1'])
