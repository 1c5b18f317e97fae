"""Probe (issue 15): decide live streams with the left context *cached* instead of re-encoded.

Today every streaming window re-encodes ~25 tokens of left context to decide
~2.8 words: most of the 11.7 tokens per finalized word at right context 4 are
left context that was already encoded when it was decided. This probe keeps,
per stream and per layer, the attention keys and values of the tokens of the
words already decided (computed in the window that decided them), and runs
each new window on its group + right context only, attending to the cached
keys/values in place of the left context.

One thing changes against the shipped computation, and this measures what
it costs on validation: the left tokens' keys/values are those of the window
that decided them (they saw their own right context then, not the current
window). Positions stay consistent: tokens are numbered from a base, and when
the numbers would pass ``--max-pos`` a full window starts a new base (a first
try that numbered each window's new tokens from the cache's length, so that
cached tokens kept positions of other windows, collapsed: 71.1 -> 33.9 on
the first 4,000 words of dev2010).

This torch probe came first; the server's implementation is
streampunct.stream_cache with engines.stream_graph
(``streampunct evaluate --live --stream-cache on|off`` measures it).

Usage (torch fp32, validation only):

    python scripts/probe_kv_cache.py CHECKPOINT --text DATA [--cache 25 50 100] [--max-words N]

It prints, for the shipped windows and for each cache length, live overall F1
on one stream (server default options, 1-4-word chunks at 2.5 words/s) and the
tokens computed per finalized word.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streampunct.data import read_punctuated_text, read_word_labels  # noqa: E402
from streampunct.evaluation import _play, live_schedule, score  # noqa: E402
from streampunct.options import SessionOptions  # noqa: E402
from streampunct.stream_state import StreamState, WindowRequest  # noqa: E402
from streampunct.windowing import WindowConfig  # noqa: E402
from training.checkpoint import checkpoint_aligner, load_checkpoint  # noqa: E402


class CachedBert:
    """A BERT encoder run on new tokens against cached keys/values of earlier ones."""

    def __init__(self, model) -> None:
        self.model = model
        enc = model.encoder
        self.emb = enc.embeddings
        self.layers = enc.encoder.layer
        cfg = enc.config
        self.heads = cfg.num_attention_heads
        self.hd = cfg.hidden_size // cfg.num_attention_heads

    def _split(self, x: torch.Tensor) -> torch.Tensor:  # [T, H] -> [h, T, d]
        return x.view(x.shape[0], self.heads, self.hd).transpose(0, 1)

    @torch.no_grad()
    def run(self, ids: np.ndarray, pos: np.ndarray, cache: list[tuple[torch.Tensor, torch.Tensor]] | None
            ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        """Hidden states [T, H] of ``ids`` at positions ``pos``, attending also to ``cache``
        (per layer K, V of shape [h, C, d]); returns them and the new tokens' per-layer K, V."""
        x = self.emb(input_ids=torch.as_tensor(ids)[None], position_ids=torch.as_tensor(pos)[None],
                     token_type_ids=torch.zeros((1, len(ids)), dtype=torch.long))[0]
        new_kv = []
        for li, layer in enumerate(self.layers):
            att = layer.attention
            q = self._split(att.self.query(x))
            k = self._split(att.self.key(x))
            v = self._split(att.self.value(x))
            new_kv.append((k, v))
            if cache is not None and cache[li][0].shape[1]:
                k = torch.cat([cache[li][0], k], dim=1)
                v = torch.cat([cache[li][1], v], dim=1)
            a = torch.softmax(q @ k.transpose(1, 2) / self.hd ** 0.5, dim=-1) @ v  # [h, T, d]
            a = a.transpose(0, 1).reshape(x.shape[0], -1)
            x = att.output.LayerNorm(att.output.dense(a) + x)
            inter = layer.intermediate(x)
            x = layer.output.LayerNorm(layer.output.dense(inter) + x)
        return x, new_kv

    @torch.no_grad()
    def logits(self, hidden: torch.Tensor) -> np.ndarray:
        mask = torch.ones((1, hidden.shape[0]), dtype=torch.long)
        return self.model.head(hidden[None], mask)[0].numpy()


class CachedStream:
    """Serves one stream's window requests, keeping the decided tokens' K/V per layer."""

    def __init__(self, bert: CachedBert, word_tokens: list[int], cache_tokens: int, cls_id: int,
                 sep_id: int, max_pos: int) -> None:
        self.bert, self.word_tokens, self.cap = bert, word_tokens, cache_tokens
        self.cls, self.sep = cls_id, sep_id
        self.cache: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.computed = 0
        self.rebases = 0
        self.base = 0
        self.max_pos = max_pos
        self.starts = np.concatenate([[0], np.cumsum(word_tokens)]).astype(int)

    def __call__(self, req: WindowRequest) -> np.ndarray:
        ids = req.input_ids
        # label_position "last": positions[0] is the first group word's last token.
        left = int(req.positions[0]) - self.word_tokens[req.first_word]  # content tokens before the group
        group_end = int(req.positions[-1]) + 1  # index in ids just after the last group word
        n_group = group_end - (1 + left)
        g0 = self.starts[req.first_word]  # stream index of the group's first token
        n_new = len(ids) - 2 - left  # group + right content tokens
        out = np.zeros((len(ids), 4), dtype=np.float32)
        if self.cache is None or g0 + n_new - self.base + 1 > self.max_pos:
            # (Re)base: one full window, as shipped; cache its left + group tokens.
            self.base = g0 - left
            hidden, kv = self.bert.run(ids, np.arange(len(ids)), None)
            self.computed += len(ids) - 2
            self.rebases += 1
            out[:] = self.bert.logits(hidden)
            self.cache = [(k[:, 1:group_end][:, -self.cap:], v[:, 1:group_end][:, -self.cap:]) for k, v in kv]
            return out
        new = np.concatenate([[self.cls], ids[1 + left:]])  # CLS + group + right + SEP
        pos = np.concatenate([[0], np.arange(g0 - self.base + 1, g0 - self.base + 1 + len(new) - 1)])
        hidden, kv = self.bert.run(new, pos, self.cache)
        self.computed += len(new) - 2
        out[1 + left:] = self.bert.logits(hidden)[1:]
        parts = [(k[:, 1:1 + n_group], v[:, 1:1 + n_group]) for k, v in kv]
        self.cache = [(torch.cat([ck, k], 1)[:, -self.cap:], torch.cat([cv, v], 1)[:, -self.cap:])
                      for (ck, cv), (k, v) in zip(self.cache, parts, strict=True)]
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", type=Path)
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--text", action="store_true", help="DATA is punctuated text (else word<TAB>label)")
    ap.add_argument("--cache", type=int, nargs="+", default=[25, 50, 100])
    ap.add_argument("--max-pos", type=int, default=126, help="rebase (one full window) past this position")
    ap.add_argument("--max-words", type=int, default=0)
    ap.add_argument("--left", type=int, default=25, help="the shipped windows' streaming left context")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(2)
    model, meta = load_checkpoint(args.checkpoint)
    aligner = checkpoint_aligner(args.checkpoint, meta)
    data = read_punctuated_text(args.data) if args.text else read_word_labels(args.data)
    words, gold = list(data.words), list(data.labels)
    if args.max_words:
        words, gold = words[: args.max_words], gold[: args.max_words]
    window = WindowConfig(126, args.left, 10)
    options = SessionOptions(right_context=3, max_delay_ms=2000)
    events = live_schedule(words)
    bert = CachedBert(model)
    wt = [len(aligner.word_ids(w)) for w in words]
    results: dict = {"checkpoint": str(args.checkpoint), "data": str(args.data), "n_words": len(words),
                     "max_pos": args.max_pos, "runs": []}

    def play(serve) -> tuple[list[int], int]:
        labels: list[int] = []
        state = StreamState(aligner, window, options)
        _, tokens = _play(state, events, serve, lambda ds: labels.extend(d.label for d in ds))
        return labels, tokens

    def full(req: WindowRequest) -> np.ndarray:
        ids = req.input_ids
        hidden, _ = bert.run(ids, np.arange(len(ids)), None)
        return bert.logits(hidden)

    t0 = time.time()
    labels, tokens = play(full)
    base_labels = labels
    f1 = score(gold, labels).overall_f1
    print(f"shipped windows (left {args.left}): live F1 {f1:.2f}, {tokens / len(words):.2f} tokens/word "
          f"({time.time() - t0:.0f} s)", flush=True)
    results["runs"].append({"mode": "window", "left": args.left, "f1": round(f1, 2),
                            "tokens_per_word": round(tokens / len(words), 2)})
    for cap in args.cache:
        t0 = time.time()
        serve = CachedStream(bert, wt, cap, aligner.cls_id, aligner.sep_id, args.max_pos)
        labels, _ = play(serve)
        f1 = score(gold, labels).overall_f1
        agree = 100.0 * float(np.mean(np.array(labels) == np.array(base_labels)))
        print(f"cached K/V, {cap} tokens: live F1 {f1:.2f}, {serve.computed / len(words):.2f} tokens computed/word, "
              f"{serve.rebases} rebases, agreement {agree:.2f}% ({time.time() - t0:.0f} s)", flush=True)
        results["runs"].append({"mode": "cache", "cache_tokens": cap, "f1": round(f1, 2),
                                "tokens_per_word": round(serve.computed / len(words), 2),
                                "rebases": serve.rebases, "agreement": round(agree, 2)})
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
