"""Measured training steps per second of an encoder on this machine, for sizing a run to a time budget.

    python -m training.step_rate --base-model cache/mpnet --batch-size 32 --max-len 128 \
        [--precision bf16] [--case-head] [--steps 30] [--json OUT.json]

Builds the model from the folder's config (random weights: the rate does not depend on
them), then times ``--steps`` optimizer steps of full-length random sequences after a few
warm-up steps, as the trainer runs them: autocast where asked and native, both heads' cross
entropy, gradient clipping, AdamW, and the loss read back every step. A run's step count is
then ``rate x seconds`` (``scripts/gpu_release.sh``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from streampunct.errors import ModelError
from training.cli_support import run_tool


def measure(base_model: str | Path, *, batch_size: int, max_len: int, precision: str = "fp32",
            case_head: bool = False, steps: int = 30, warmup: int = 5, device: str = "auto") -> dict:
    import torch
    import torch.nn.functional as F

    from streampunct.labels import LABELS
    from training.model import build_model
    from training.precision import use_bf16
    from training.trainer import resolve_device

    if not (Path(base_model) / "config.json").is_file():
        raise ModelError(f"{base_model} is not a Hugging Face model folder (no config.json)")
    dev = resolve_device(device)
    bf16 = use_bf16(precision == "bf16", dev)
    model = build_model(base_model, random_init=True, case_head=case_head).to(dev)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    vocab = int(model.encoder.config.vocab_size)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (batch_size, max_len), generator=gen).to(dev)
    mask = torch.ones_like(ids)
    labels = torch.randint(0, len(LABELS), (batch_size, max_len), generator=gen).to(dev)

    def step() -> float:
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
            logits, case = model.forward_heads(ids, mask)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))
            if case is not None:
                loss = loss + 0.5 * F.cross_entropy(case.float().reshape(-1, case.shape[-1]),
                                                    labels.reshape(-1) % case.shape[-1])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss.detach())

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = time.perf_counter() - t0
    rate = steps / seconds
    return {"base_model": str(base_model), "device": str(dev),
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "precision": "bf16" if bf16 else "fp32", "batch_size": batch_size, "max_len": max_len,
            "case_head": case_head, "steps": steps, "seconds": round(seconds, 3),
            "steps_per_s": round(rate, 3), "tokens_per_s": round(rate * batch_size * max_len, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.step_rate", description=__doc__.split("\n")[0])
    ap.add_argument("--base-model", required=True, help="encoder folder (config.json; weights unused)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--case-head", action="store_true")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)

    def go() -> int:
        r = measure(args.base_model, batch_size=args.batch_size, max_len=args.max_len, precision=args.precision,
                    case_head=args.case_head, steps=args.steps, warmup=args.warmup, device=args.device)
        print(json.dumps(r))
        if args.json:
            Path(args.json).write_text(json.dumps(r, indent=1) + "\n", encoding="utf-8")
        return 0

    return run_tool(go)


if __name__ == "__main__":
    raise SystemExit(main())
