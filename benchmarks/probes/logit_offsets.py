# One-off probe (issue 54, 2026-12-01): per-class logit offsets on ASR-like noisy dev2010.
# Run: python benchmarks/probes/logit_offsets.py models/base
# Rule (written before the run): adopt per-class logit offsets for a model if the offsets chosen on
# noisy dev2010 seed 0 gain >= 1.0 overall F1 on noisy dev2010 seeds 1-2 (mean), and lose <= 0.2 on
# clean dev2010 and <= 0.3 on SwDA validation. Otherwise drop.
import sys, itertools, json
import numpy as np
from streampunct.core.decoder import OfflineDecoder
from streampunct.text.convert import text_to_word_labels_cased
from streampunct.evaluation.scores import evaluate
from training.augment import augment, NoiseConfig
model = sys.argv[1] if len(sys.argv) > 1 else None
p = OfflineDecoder.from_model_dir(model)
def load(path):
    w, l, c = text_to_word_labels_cased(open(path).read())
    return w, l
dev_w, dev_l = load('../shared/data/cased_spoken/ted_iwslt_dev2010_cased.txt')
swda_w, swda_l = load('../shared/data/cased_spoken/swda_val_cased.txt')
swda_w, swda_l = swda_w[:40000], swda_l[:40000]
cfg = NoiseConfig(share=1.0, asr_rate=0.15, filler=0, repeat=0, restart=0, split_merge=0)
def noisy(seed):
    rng = np.random.default_rng(seed)
    W, L = [], []
    for a in range(0, len(dev_w), 200):  # 200-word pieces as documents
        w, l, _, _ = augment(list(dev_w[a:a+200]), list(dev_l[a:a+200]), None, None, rng, cfg)
        W += w; L += l
    return W, L
sets = {'clean': (dev_w, dev_l), 'swda': (swda_w, swda_l)}
for s in range(3):
    sets[f'noisy{s}'] = noisy(s)
logits = {}
for k, (w, l) in sets.items():
    logits[k] = p.logits(w)
    print(k, len(w), file=sys.stderr, flush=True)
def f1(k, off):
    pred = np.argmax(logits[k] + off, axis=-1)
    return evaluate(sets[k][1], pred).overall[2]
zero = np.zeros(4)
base = {k: f1(k, zero) for k in sets}
print('no offset', {k: round(v, 2) for k, v in base.items()})
grid = np.arange(-1.0, 2.01, 0.25)
best = max(((f1('noisy0', np.array([0, c, pe, q])), (c, pe, q)) for c in grid for pe in grid for q in (-0.5, 0, 0.5, 1.0)))
off = np.array([0, *best[1]])
res = {k: f1(k, off) for k in sets}
print('chosen on noisy0', best[1], {k: round(v - base[k], 2) for k, v in res.items()})
gain = np.mean([res['noisy1'] - base['noisy1'], res['noisy2'] - base['noisy2']])
print('rule:', 'ADOPT' if gain >= 1.0 and res['clean'] - base['clean'] >= -0.2 and res['swda'] - base['swda'] >= -0.3 else 'DROP', round(gain, 2))
