"""The training loop: AdamW with warmup and linear decay, clipping, validation,
early stopping, best checkpoint, JSON-lines metrics, resume.

``train(cfg, out_dir)`` runs the ``supervised`` and ``adversarial`` kinds;
``training.self_training`` builds on the same pieces. Runs are reproducible:
Python, numpy and torch are seeded, and epoch e cuts and shuffles the data
with the seed pair (seed, e), so a resumed run replays the same batches and
skips those already done.

Output folder::

    best/             the best checkpoint so far (see training.checkpoint)
    state.pt          resume state (model, optimizer, scheduler, counters, RNG)
    metrics.jsonl     one JSON object per line: train / valid / window_tuning / done
    config.toml       the resolved config
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import random
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm
from transformers import get_linear_schedule_with_warmup

from streampunct.core.alignment import Aligner
from streampunct.core.windowing import WindowConfig
from streampunct.errors import InputError, StreampunctError
from streampunct.labels import LABELS, mark_rates
from training.checkpoint import load_checkpoint, read_metadata, save_checkpoint
from training.config import TrainConfig, config_to_toml
from training.data import Batch, Document, SequenceDataset
from training.evaluation import Validation, document_logits, validate
from training.objectives import to_torch
from training.precision import use_bf16

log = logging.getLogger(__name__)


class TrainingInterrupted(StreampunctError):
    """SIGTERM/SIGINT stopped the run after its resume state was written. ``signum``: the
    signal (``streampunct train`` exits with 128 + it: 130 for Ctrl-C, 143 for SIGTERM)."""

    def __init__(self, step: int, state_path: Path, signum: int = signal.SIGINT) -> None:
        super().__init__(f"interrupted at step {step}; resume state written to {state_path} "
                         "(continue with --resume)")
        self.step = step
        self.state_path = state_path
        self.signum = int(signum)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise InputError("optim.device = 'cuda' but torch sees no CUDA device")
    return torch.device(name)


def rng_state() -> dict[str, Any]:
    """Every random generator a step draws from (Python, numpy, torch CPU and CUDA)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def atomic_torch_save(payload: Any, path: Path) -> None:
    """Write ``path`` so that a kill at any moment leaves either the old or the new file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError:  # pragma: no cover - platforms without directory fsync
        pass


#: Config keys that do not shape the saved weights although they sit in ``[model]``
#: (the resumed weights replace whatever they initialised).
RESUMABLE_MODEL_KEYS = frozenset({"model.dropout", "model.random_init", "model.init_head"})
#: ``[method]`` keys that change the modules: the objective's (the adversarial POS head and
#: discriminator) or the model's (a self-training student's encoder).
STRUCTURAL_METHOD_KEYS = frozenset({"method.kind", "method.adversarial.disc_hidden",
                                    "method.adversarial.use_discriminator",
                                    "method.self_training.student_base_model"})
#: Keys whose new value a resume does not apply: the resumed optimizer keeps its saved values.
OPTIMIZER_KEPT_KEYS = frozenset({"optim.lr", "optim.head_lr", "optim.weight_decay"})


def flat_config(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1e-4}}`` -> ``{"optim.lr": 1e-4}`` (lists as tuples)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_config(value, name + "."))
        else:
            out[name] = tuple(value) if isinstance(value, list) else value
    return out


def structural_key(key: str) -> bool:
    """Whether a difference in ``key`` makes the saved weights or optimizer state another shape."""
    return key in STRUCTURAL_METHOD_KEYS or (key.startswith("model.") and key not in RESUMABLE_MODEL_KEYS)


def config_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(key, saved value, current value)`` of each key the two config dicts both have and
    disagree on (a key only one side has comes from another version of the code: skipped)."""
    old, new = flat_config(saved), flat_config(current)
    return [(k, old[k], new[k]) for k in sorted(old.keys() & new.keys()) if old[k] != new[k]]


def check_resume_config(saved: dict[str, Any], current: dict[str, Any], state_path: Path) -> None:
    """Refuse to resume ``state_path`` with a config whose model differs from the saved one
    (``InputError``); log a warning for each other changed key."""
    changes = config_changes(saved, current)
    refused = [c for c in changes if structural_key(c[0])]
    if refused:
        listed = "; ".join(f"{k}: saved {a!r}, now {b!r}" for k, a, b in refused)
        raise InputError(f"cannot resume {state_path}: the config changes the model it saved ({listed}); "
                         f"train into another --out, or resume with the saved config "
                         f"({state_path.parent / 'config.toml'})")
    for k, a, b in changes:
        note = " (not applied: the resumed optimizer keeps its saved value)" if k in OPTIMIZER_KEPT_KEYS else ""
        log.warning("resuming %s with a changed config: %s %r -> %r%s", state_path, k, a, b, note)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)


def param_groups(modules: list[nn.Module], weight_decay: float, *, lr: float, head_lr: float = 0.0,
                 encoder: nn.Module | None = None) -> list[dict[str, Any]]:
    """AdamW groups: no weight decay on biases and normalisation weights; the
    parameters outside ``encoder`` (randomly initialised heads) use ``head_lr``."""
    encoder_ids = {id(p) for p in encoder.parameters()} if encoder is not None else set()
    groups: dict[tuple[bool, bool], list[nn.Parameter]] = {}
    seen: set[int] = set()
    for module in modules:
        for name, p in module.named_parameters():
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            lname = name.lower()
            no_decay = p.ndim < 2 or "norm" in lname or "bias" in lname
            is_head = encoder is not None and id(p) not in encoder_ids
            groups.setdefault((no_decay, is_head), []).append(p)
    return [{"params": params, "weight_decay": 0.0 if no_decay else weight_decay,
             "lr": (head_lr or lr) if is_head else lr}
            for (no_decay, is_head), params in sorted(groups.items())]


class MetricsLog:
    """Appends JSON objects, one a line, flushed at once (safe to tail while training)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, kind: str, **fields: Any) -> None:
        record = {"type": kind, "time": round(time.time(), 1), **fields}
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")

    def reset(self) -> None:
        """Start the log afresh: a run that starts from step 0 keeps no earlier attempt's records."""
        self.path.unlink(missing_ok=True)

    def truncate_after(self, step: int) -> None:
        """Drop records of steps after ``step`` (written after the resume state the run
        continues from), so a resumed run's log reads as one run."""
        if not self.path.is_file():
            return
        kept = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by the kill
            # what finish() writes (the tuned windows, done) comes again when the resumed run ends
            if rec.get("type") in ("done", "window_tuning") or rec.get("step", -1) > step:
                continue
            kept.append(line)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(k + "\n" for k in kept), encoding="utf-8")
        tmp.replace(self.path)


@dataclass
class RunResult:
    """What a finished training run reports.

    Attributes:
        best_dir: the best checkpoint folder.
        best_f1: its validation overall F1 (argmax decoding).
        validation: its validation metrics dict.
        steps: optimisation steps done.
        window: the window geometry stored with the checkpoint.
    """

    best_dir: Path
    best_f1: float
    validation: dict[str, Any]
    steps: int
    window: dict[str, int] = field(default_factory=dict)


@dataclass
class TrainState:
    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_f1: float = -1.0
    best_step: int = -1
    bad_evals: int = 0
    stopped: bool = False
    words_seen: int = 0
    #: the step of the last validation (-1: none; a state written before this field: unknown)
    evaluated_step: int = -1


class Trainer:
    """Runs one model + objective over batch streams, validating and checkpointing.

    ``objective(model, batch_tensors, progress, **task)`` returns ``(loss, logs)``;
    ``stream(epoch)`` yields the epoch's batches and ``steps_per_epoch`` counts them.
    """

    def __init__(self, cfg: TrainConfig, *, model: nn.Module, objective: nn.Module,
                 aligner: Aligner, stream: Callable[[int], Iterator[Batch]], steps_per_epoch: int,
                 valid_docs: list[Document], out_dir: Path, tokenizer_source: Path,
                 metadata: dict[str, Any], caption_docs: Sequence[Document] = ()) -> None:
        self.cfg = cfg
        self.model = model
        self.objective = objective
        self.aligner = aligner
        self.stream = stream
        self.steps_per_epoch = steps_per_epoch
        self.valid_docs = valid_docs
        self.caption_docs = list(caption_docs)  # held-out ASR captions: marks counted at validation
        self.out_dir = Path(out_dir)
        self.tokenizer_source = tokenizer_source
        self.metadata = metadata
        self.window = WindowConfig(cfg.eval.window_size, cfg.eval.window_left, cfg.eval.window_right)
        self.window.validate_for(cfg.data.max_word_tokens)
        o = cfg.optim
        self.device = resolve_device(o.device)
        self.bf16 = use_bf16(o.precision == "bf16", self.device)
        if self.device.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
        model.to(self.device)
        objective.to(self.device)
        total = o.epochs * steps_per_epoch
        self.total_steps = min(total, o.max_steps) if o.max_steps else total
        #: where the run ends: ``total_steps``, or ``stop_step`` before it (the schedule spans total_steps)
        self.end_step = min(self.total_steps, o.stop_step) if o.stop_step else self.total_steps
        modules = [model, objective]
        self.optimizer = torch.optim.AdamW(
            param_groups(modules, o.weight_decay, lr=o.lr, head_lr=o.head_lr,
                         encoder=getattr(model, "encoder", None)), lr=o.lr)
        warmup = int(o.warmup_ratio * self.total_steps)
        # linear warmup to the peak rate, then linear decay to 0 at the last step
        self.scheduler = get_linear_schedule_with_warmup(self.optimizer, warmup, self.total_steps)
        self.state = TrainState()
        self.log = MetricsLog(self.out_dir / "metrics.jsonl")
        self.best_dir = self.out_dir / "best"
        self.state_path = self.out_dir / "state.pt"
        self._stop_signal: int | None = None
        #: Called after every step with the state (tests use it to interrupt a run).
        self.on_step: Callable[[TrainState], None] | None = None

    # --- resume state ----------------------------------------------------------------

    def save_state(self) -> None:
        gen = getattr(self.objective, "_gen", None)
        payload = {
            "model": self.model.state_dict(),
            "objective": self.objective.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "state": dataclasses.asdict(self.state),
            "rng": rng_state(),
            "objective_rng": gen.get_state() if gen is not None else None,
            "config": self.cfg.to_dict(),
        }
        atomic_torch_save(payload, self.state_path)
        self._last_save = time.monotonic()

    def load_state(self) -> bool:
        if not self.state_path.is_file():
            return False
        try:
            payload = torch.load(self.state_path, map_location=self.device, weights_only=False)
            if not isinstance(payload, dict) or "state" not in payload:
                raise ValueError("not a resume state")
        except (RuntimeError, ValueError, EOFError, pickle.UnpicklingError, AttributeError, KeyError) as e:
            detail = " ".join(str(e).split())[:200] or type(e).__name__
            raise InputError(f"cannot resume {self.state_path}: the file is damaged ({detail}); remove it to "
                             f"start the run over, or train into another --out") from e
        if "config" in payload:  # resume states written before the config record: unchecked
            check_resume_config(payload["config"], self.cfg.to_dict(), self.state_path)
        try:
            self.model.load_state_dict(payload["model"])
            self.objective.load_state_dict(payload["objective"])
            self.optimizer.load_state_dict(payload["optimizer"])
        except (RuntimeError, ValueError, KeyError) as e:  # a model the config check cannot see
            detail = " ".join(str(e).split())[:300] or type(e).__name__
            raise InputError(f"cannot resume {self.state_path}: its weights do not fit the model of this "
                             f"config ({detail}); train into another --out, or resume with the saved "
                             f"config") from e
        self.scheduler.load_state_dict(payload["scheduler"])
        saved = dict(payload["state"])
        if "evaluated_step" not in saved:  # written before the field: an epoch's end follows its validation
            saved["evaluated_step"] = saved["step"] if saved.get("batch_in_epoch") == 0 else -1
        self.state = TrainState(**saved)
        if "rng" in payload:
            rng = payload["rng"]
            rng["torch"] = rng["torch"].cpu()
            if "cuda" in rng:
                rng["cuda"] = [t.cpu() for t in rng["cuda"]]
            set_rng_state(rng)
        else:  # resume states written before the full RNG record
            torch.set_rng_state(payload["torch_rng"].cpu())
        gen = getattr(self.objective, "_gen", None)
        if gen is not None and payload.get("objective_rng") is not None:
            gen.set_state(payload["objective_rng"].cpu())
        self.log.truncate_after(self.state.step)
        log.info("resumed from %s at step %d (epoch %d, batch %d)", self.state_path,
                 self.state.step, self.state.epoch, self.state.batch_in_epoch)
        return True

    # --- validation ------------------------------------------------------------------

    def evaluate(self) -> Validation:
        t0 = time.perf_counter()
        v = validate(self.model, self.aligner, self.valid_docs, self.window,
                     batch_size=self.cfg.eval.batch_size)
        s = self.state
        s.evaluated_step = s.step
        improved = v.overall_f1 > s.best_f1
        extra = {}
        if self.caption_docs:  # no labels: how densely it marks ASR text (benchmarks.mark_rate)
            logits = document_logits(self.model, self.aligner, self.caption_docs, self.window,
                                     batch_size=self.cfg.eval.batch_size)
            rates = mark_rates(np.concatenate([lg[:, :len(LABELS)].argmax(-1) for lg in logits]))
            extra["caption_marks_per_100_words"] = rates["marks_per_100_words"]
            # per class too: a candidate can keep the overall density with more commas and fewer
            # sentence ends (the release-3 candidate that failed test2011asr did)
            extra["caption_marks_per_class"] = rates["per_class"]
            log.info("  held-out captions: %.2f marks per 100 words (%s; %d words)",
                     rates["marks_per_100_words"],
                     ", ".join(f"{k} {v:.2f}" for k, v in rates["per_class"].items()), rates["words"])
        self.log.write("valid", step=s.step, epoch=s.epoch, words_seen=s.words_seen,
                       seconds=round(time.perf_counter() - t0, 1),
                       improved=improved, **v.to_dict(), **extra)
        log.info("validation at step %d: overall F1 %.2f%s\n%s", s.step, v.overall_f1,
                 " (best so far)" if improved else "", v.report.table())
        if v.viterbi is not None:
            log.info("  with Viterbi: overall F1 %.2f", v.viterbi.overall_f1)
        if improved:
            s.best_f1, s.best_step, s.bad_evals = v.overall_f1, s.step, 0
            self.save_best(v.to_dict())
        else:
            s.bad_evals += 1
            if self.cfg.optim.patience and s.bad_evals >= self.cfg.optim.patience:
                log.info("early stopping: %d validations without improvement", s.bad_evals)
                s.stopped = True
        return v

    def checkpoint_metadata(self, validation: dict[str, Any]) -> dict[str, Any]:
        meta = dict(self.metadata)
        meta.update(
            label_position=self.cfg.data.label_position,
            max_word_tokens=self.cfg.data.max_word_tokens,
            window=self.window.to_dict(),
            training_config=self.cfg.to_dict(),
            validation={**validation, "step": self.state.step, "epoch": self.state.epoch},
        )
        return meta

    def save_best(self, validation: dict[str, Any]) -> None:
        save_checkpoint(self.best_dir, self.model, self.tokenizer_source,
                        self.checkpoint_metadata(validation))

    # --- the loop --------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._stop_signal is not None:  # a second signal: stop at once, as the command line does
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            from streampunct.cli import Terminated

            raise Terminated(signum)  # a KeyboardInterrupt too: 128 + the signal at the command line
        self._stop_signal = signum
        log.warning("signal %d: writing the resume state after this step, then stopping", signum)

    def fit(self, *, resume: bool = False) -> RunResult:
        """Train to the end, or until SIGTERM/SIGINT (then the resume state is written and
        ``TrainingInterrupted`` raised)."""
        handlers = {}
        try:
            for sig in (signal.SIGTERM, signal.SIGINT):
                handlers[sig] = signal.signal(sig, self._on_signal)
        except ValueError:  # not the main thread: no signal handling
            handlers = {}
        try:
            elapsed = self._fit(resume=resume)
        finally:
            for sig, h in handlers.items():
                signal.signal(sig, h)
        # The state is written: a stop asked for since (in the last validation) stops here, and
        # one during the window tuning at once (the caller's handlers); --resume tunes again.
        if self._stop_signal is not None:
            self._interrupted()
        return self.finish(elapsed)

    def _interrupted(self) -> None:
        """Stop for the signal received, its resume state written: log it, raise."""
        self.log.write("interrupted", step=self.state.step, signal=self._stop_signal)
        raise TrainingInterrupted(self.state.step, self.state_path, self._stop_signal)

    def _fit(self, *, resume: bool = False) -> float:
        """The training loop; its wall seconds."""
        cfg = self.cfg
        self.out_dir.mkdir(parents=True, exist_ok=True)
        resumed = resume and self.load_state()  # first: a refused resume leaves config.toml as it was
        (self.out_dir / "config.toml").write_text(config_to_toml(cfg), encoding="utf-8")
        if not resumed:
            self.log.reset()  # a new run's log, whatever an earlier attempt left (one killed before its state)
            self.log.write("start", config=cfg.to_dict(), steps=self.total_steps,
                           steps_per_epoch=self.steps_per_epoch)
        s = self.state  # after load_state, which replaces it
        self.model.train()
        self.objective.train()
        o = cfg.optim
        t_start = time.perf_counter()
        self._last_save = time.monotonic()
        while s.epoch < o.epochs and not s.stopped and s.step < self.end_step:
            skip = s.batch_in_epoch
            # the bar ends where this epoch ends: at the epoch's last batch, or at max_steps
            bar_total = min(self.steps_per_epoch, skip + self.end_step - s.step)
            bar = tqdm(total=bar_total, initial=skip, desc=f"epoch {s.epoch + 1}/{o.epochs}",
                       unit="batch", dynamic_ncols=True, mininterval=5.0)
            sums: dict[str, float] = {}
            counts: dict[str, int] = {}  # per key: some keys exist only for one task's batches
            tokens, t_log = 0, time.perf_counter()
            epoch_done = True  # unless the run ends before the epoch's last batch
            for i, batch in enumerate(self.stream(s.epoch)):
                if i < skip:
                    continue
                progress = s.step / max(self.total_steps, 1)
                tensors = to_torch(batch, self.device)
                with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
                    loss, logs = self.objective(self.model, tensors, progress, task=batch.task)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if o.grad_clip > 0:
                    params = [p for g in self.optimizer.param_groups for p in g["params"]]
                    logs["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, o.grad_clip))
                self.optimizer.step()
                self.scheduler.step()
                s.step += 1
                s.batch_in_epoch = i + 1
                tokens += int(batch.attention_mask.sum())
                s.words_seen += batch.n_labelled
                logs["loss"] = float(loss.detach())
                for k, v in logs.items():
                    sums[k] = sums.get(k, 0.0) + v
                    counts[k] = counts.get(k, 0) + 1
                bar.update(1)
                if s.step % o.log_every == 0:
                    dt = time.perf_counter() - t_log
                    means = {k: round(v / counts[k], 5) for k, v in sums.items()}
                    self.log.write("train", step=s.step, epoch=s.epoch,
                                   lr=self.scheduler.get_last_lr()[0],
                                   head_lr=self.scheduler.get_last_lr()[-1],
                                   tokens_per_s=round(tokens / max(dt, 1e-9), 1), **means)
                    bar.set_postfix(loss=f"{means['loss']:.4f}", tok_s=f"{tokens / max(dt, 1e-9):.0f}")
                    sums, counts, tokens, t_log = {}, {}, 0, time.perf_counter()
                if o.eval_every and s.step % o.eval_every == 0:
                    self.evaluate()
                    self.model.train()
                due = o.checkpoint_every and s.step % o.checkpoint_every == 0 or \
                    o.checkpoint_minutes and time.monotonic() - self._last_save >= 60 * o.checkpoint_minutes
                if due and self._stop_signal is None:  # a stop writes the state just below
                    self.save_state()
                if self.on_step is not None:
                    self.on_step(s)
                if self._stop_signal is not None:
                    bar.close()
                    self.save_state()
                    self._interrupted()
                if s.stopped or s.step >= self.end_step:
                    epoch_done = False  # even after its last batch: a resumed run's loop closes it
                    break
            bar.close()
            if s.evaluated_step != s.step:
                self.evaluate()
                self.model.train()
            if epoch_done:  # a run ended mid-epoch (stop_step, max_steps) continues it when extended
                s.epoch += 1
                s.batch_in_epoch = 0
            self.save_state()
            if self._stop_signal is not None and s.step < self.end_step and not s.stopped:
                self._interrupted()  # asked during the epoch's validation: here, not one step later
        if s.step > 0 and s.evaluated_step != s.step and not s.stopped:
            # stopped by a signal in its last step, before that step's validation: it comes now
            self.evaluate()
            self.save_state()
        return time.perf_counter() - t_start

    def finish(self, elapsed: float) -> RunResult:
        meta = read_metadata(self.best_dir)
        window = meta["window"]
        if self.cfg.eval.tune_windows:
            from training.window_tuning import tune_checkpoint_windows

            window = tune_checkpoint_windows(self.best_dir, self.valid_docs, self.cfg.eval,
                                             max_word_tokens=self.cfg.data.max_word_tokens,
                                             log=self.log)
            meta = read_metadata(self.best_dir)
        self.log.write("done", steps=self.state.step, seconds=round(elapsed, 1),
                       best_f1=self.state.best_f1, best_step=self.state.best_step, window=window)
        return RunResult(self.best_dir, self.state.best_f1, meta["validation"], self.state.step, window)


def reload_best(result: RunResult) -> nn.Module:
    model, _ = load_checkpoint(result.best_dir)
    return model


def interleave(main: Iterator[Batch], aux_factory: Callable[[int], Iterator[Batch]], every: int
               ) -> Iterator[Batch]:
    """``every`` main batches, then one auxiliary batch, ...; the auxiliary stream cycles."""
    cycle = 0
    aux = aux_factory(cycle)
    for i, batch in enumerate(main, 1):
        yield batch
        if i % every == 0:
            nxt = next(aux, None)
            if nxt is None:
                cycle += 1
                aux = aux_factory(cycle)
                nxt = next(aux)
            yield nxt


def dataset_stream(dataset: SequenceDataset, batch_size: int, seed: int) -> Callable[[int], Iterator[Batch]]:
    return lambda epoch: dataset.iter_batches(batch_size, seed, epoch)
