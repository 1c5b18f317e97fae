"""``streampunct build-engine``: a training checkpoint -> a runtime model folder.

Registered under the ``streampunct.commands`` entry-point group (pyproject.toml).

Loads the checkpoint with ``training.checkpoint.load_checkpoint``, exports
ONNX, derives the artifact for the chosen backend and precision, measures
parity against torch on validation text (cut into windows by the runtime's
windowing, so parity is measured on what the offline decoder runs; without
validation text, on random token ids), and writes the model folder (see
``engines.build.builder`` and docs/engines.md).

With ``--backend tensorrt``, ``--model`` may also be a built model folder (the
shipped ``models/default``, ``models/base``): the model is rebuilt from its own
graph's weights, de-quantized (``engines.build.from_graph``), and the labels of
every artifact are also compared with that graph. ``--graph-only`` stops before
the TensorRT builder (a host without TensorRT), with the graph TensorRT takes as
the folder's artifact.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.build.onnx_export import MIN_EXPORT_OPSET
from engines.build.parity import ParityWindows
from engines.deps import extra_hint
from engines.model_meta import METADATA_FILE, has_model_meta
from streampunct.commands.argtypes import (
    non_negative_int,
    path_argument,
    positive_float,
    positive_int,
)
from streampunct.errors import DependencyError, InputError, ModelError
from streampunct.model import load_model_info, model_folder_argument
from streampunct.text.textfile import cannot_write
from streampunct.text.word_labels import read_word_labels

NAME = "build-engine"
HELP = ("export a trained checkpoint to ONNX Runtime (fp32/fp16/int8/int4) or TensorRT (fp16/int8), or a built "
        "model folder's own graph to TensorRT, with parity figures")

log = logging.getLogger(__name__)
#: Calibration reads this many words per window wanted (a 128-token window holds about 100).
_LINES_PER_WINDOW = 110


def default_parity_data() -> Path | None:
    """IWSLT dev2012 under $STREAMPUNCT_DATA or ../shared/data (never a test set), if present."""
    root = os.environ.get("STREAMPUNCT_DATA")
    base = Path(root) if root else Path(__file__).resolve().parents[1].parent / "shared" / "data"
    path = base / "iwslt2011_che" / "dev2012"
    return path if path.is_file() else None


def opset_number(text: str) -> int:
    """``--opset``: an integer the export supports (:data:`MIN_EXPORT_OPSET` or later)."""
    value = positive_int(text)
    if value < MIN_EXPORT_OPSET:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_EXPORT_OPSET} (the encoders' attention, "
                                         f"scaled_dot_product_attention, exports from opset 14), got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, type=model_folder_argument, metavar="CKPT",
                        help="training checkpoint folder (encoder + head.safetensors + streampunct.json); "
                             "with --backend tensorrt also a built model folder (models/default, models/base): "
                             "the model is rebuilt from its graph's weights, de-quantized")
    parser.add_argument("--backend", choices=("onnxruntime", "tensorrt"), default="onnxruntime",
                        help="target runtime (default: onnxruntime)")
    parser.add_argument("--precision", choices=("fp32", "fp16", "int8", "int4"), default=None,
                        help="default: int8 for onnxruntime, fp16 for tensorrt; int4 (onnxruntime): "
                             "4-bit weights in blocks of 32 (MatMulNBits)")
    parser.add_argument("--out", type=path_argument, metavar="DIR", default=None,
                        help="model folder to write (e.g. models/default); not needed when --model is a built "
                             "model folder and --triton-repo is given")
    parser.add_argument("--max-batch", type=positive_int, default=32,
                        help="TensorRT profile max batch (default 32)")
    parser.add_argument("--max-len", type=positive_int, default=256,
                        help="TensorRT profile max sequence length in tokens (default 256; at least the "
                             "profile's minimum, 8)")
    parser.add_argument("--opset", type=opset_number, default=17,
                        help=f"ONNX opset (default 17; at least {MIN_EXPORT_OPSET})")
    parser.add_argument("--parity-data", type=path_argument, default=None, metavar="PATH",
                        help="word<TAB>LABEL validation file (default: iwslt2011_che/dev2012 when "
                             "present; without one, parity uses random token ids)")
    parser.add_argument("--parity-lines", type=positive_int, default=2000,
                        help="words of the validation file used for parity (default 2000)")
    parser.add_argument("--calibration-windows", type=non_negative_int, default=64,
                        help="128-token windows (read after the parity lines) for fp16/int8 "
                             "calibration (default 64)")
    parser.add_argument("--timing-cache", type=path_argument, default=None,
                        help="TensorRT timing cache file (read and updated)")
    parser.add_argument("--workspace-gb", type=positive_float, default=4.0,
                        help="TensorRT builder workspace in GiB (default 4)")
    parser.add_argument("--graph-only", action="store_true",
                        help="tensorrt: stop before the TensorRT builder: write and check the graph it takes "
                             "(model.fp16.onnx, model.qdq.onnx or, for fp32, model.onnx; the folder's artifact) "
                             "with parity figures, on a host without TensorRT")
    parser.add_argument("--int8-activations", choices=("emulate", "float"), default=None,
                        help="tensorrt from a built folder with an int8 graph (models/default): 'emulate' "
                             "(default) quantizes each linear layer's input to uint8 per row as the shipped "
                             "graph does, in a float32 graph (labels as the CPU server's); 'float' leaves "
                             "activations in float (fp16 plans)")
    parser.add_argument("--no-per-channel", action="store_true",
                        help="per-tensor instead of per-channel int8 weight scales (onnxruntime)")
    parser.add_argument("--full-range", action="store_true",
                        help="onnxruntime int8: 8-bit instead of 7-bit weights (labels then differ "
                             "between x86 CPUs with and without VNNI)")
    parser.add_argument("--quantize-embeddings", action="store_true",
                        help="onnxruntime int8 / int4: also store the embedding tables as int8 / 4 bits "
                             "(smaller file)")
    t = parser.add_argument_group(
        "Triton", "--triton-repo DIR writes a Triton Inference Server model repository for the model folder "
                  "(--model when it is a built folder, else --out after the build): an ONNX Runtime entry with "
                  "dynamic batching and a TensorRT plan entry (engines/build/triton_repo.py, docs/engines.md)")
    t.add_argument("--triton-repo", type=path_argument, default=None, metavar="DIR", help="the repository to write")
    t.add_argument("--triton-name", default="streampunct",
                   help="the ONNX Runtime entry's model name; the plan's is NAME_trt (default: streampunct)")
    t.add_argument("--triton-kind", choices=("cpu", "gpu"), default="cpu",
                   help="instance group of the ONNX Runtime entry: KIND_CPU or KIND_GPU (default: cpu)")
    t.add_argument("--triton-instances", type=positive_int, default=1, metavar="N",
                   help="model instances (per GPU for gpu) Triton runs side by side (default 1)")
    t.add_argument("--triton-max-batch", type=positive_int, default=64, metavar="N",
                   help="max_batch_size of the ONNX Runtime entry (default 64)")
    t.add_argument("--triton-queue-delay-us", type=non_negative_int, default=1000, metavar="US",
                   help="dynamic batching: longest a request waits for others (default 1000)")
    t.add_argument("--triton-threads", type=positive_int, default=None, metavar="N",
                   help="ONNX Runtime intra-op threads per CPU instance (default: the backend's, every core)")
    t.add_argument("--no-triton-plan", action="store_true", help="do not write the TensorRT plan entry")
    parser.add_argument("--no-stream-graph", action="store_true",
                        help="onnxruntime int8 / int4: do not add the streaming graph (cached left context for "
                             "the server's windows, quantized as the folder's artifact; added by default for "
                             "BERT- and MPNet-layout encoders, docs/server.md)")


#: What build-engine reads from a checkpoint folder besides tokenizer.json and streampunct.json.
CHECKPOINT_FILES = ("config.json", "head.safetensors")


def check_checkpoint_folder(folder: Path) -> None:
    """Refuse a folder that is not a training checkpoint, saying what it is instead."""
    missing = [name for name in CHECKPOINT_FILES if not (folder / name).is_file()]
    if not missing:
        return
    graphs = sorted(p.name for p in folder.iterdir() if p.suffix in (".onnx", ".plan"))
    if has_model_meta(folder) and graphs:
        raise InputError(
            f"{folder} is a built model folder (it has streampunct.json and {graphs[0]}), not a training "
            "checkpoint: build-engine needs a checkpoint folder with the encoder (config.json and its "
            "weights) and head.safetensors (e.g. checkpoints/NAME/best); only --backend tensorrt "
            "builds from a built folder's own graph"
        )
    raise InputError(f"{folder} is not a training checkpoint: no {' and no '.join(missing)} "
                     "(build-engine needs the encoder's config.json and weights and head.safetensors)")


def run(args: argparse.Namespace) -> int:
    from engines.base import DependencyMissing, EngineError

    try:
        return _run(args)
    except DependencyMissing as e:
        raise DependencyError(str(e)) from e
    except EngineError as e:
        raise ModelError(str(e)) from e


def is_checkpoint_folder(folder: Path) -> bool:
    """A training checkpoint: the encoder's config.json and head.safetensors."""
    return all((folder / name).is_file() for name in CHECKPOINT_FILES)


#: What ``streampunct train --out RUN`` writes into RUN beside ``best/`` (training.trainer: the
#: resume state, the metrics log; training.self_training: its record of the rounds).
RUN_FILES = ("state.pt", "metrics.jsonl", "self_training.json")


def training_run_entries(folder: Path) -> list[str]:
    """What makes ``folder`` a training run's folder (``streampunct train --out``): the files
    of :data:`RUN_FILES` there, and ``best/`` where it holds a checkpoint; empty for another folder."""
    found = [name for name in RUN_FILES if (folder / name).is_file()]
    if is_checkpoint_folder(folder / "best"):
        found.append("best/")
    return found


def is_built_model_folder(folder: Path) -> bool:
    """A runtime model folder (streampunct.json and a graph or plan), not a training checkpoint."""
    return (folder.is_dir() and has_model_meta(folder) and not is_checkpoint_folder(folder)
            and any(p.suffix in (".onnx", ".plan") for p in folder.iterdir()))


def write_triton_repo_from_args(model_dir: Path, args: argparse.Namespace) -> None:
    """``--triton-repo``: the repository for a built model folder; prints what it wrote."""
    from engines.build.triton_repo import TritonRepoConfig, write_triton_repo

    config = TritonRepoConfig(
        model_name=args.triton_name, kind=args.triton_kind, instances=args.triton_instances,
        max_batch=args.triton_max_batch, max_queue_delay_us=args.triton_queue_delay_us,
        intra_op_threads=args.triton_threads, plan=not args.no_triton_plan, plan_max_batch=args.max_batch,
    )
    for line in write_triton_repo(model_dir, args.triton_repo, config).summary_lines():
        print(line)


@dataclass(frozen=True)
class _Source:
    """What build-engine builds from: a module, its metadata and what names it."""

    module: Any
    info: Any  # streampunct.model.ModelInfo
    source_sha256: str
    tokenizer: Path
    graph: Any = None  # engines.build.from_graph.GraphSource when rebuilt from a folder's graph


def _checkpoint_source(ckpt: Path) -> _Source:
    from engines.sidecar import sha256_files

    try:
        from training.checkpoint import load_checkpoint
    except ImportError as e:
        raise DependencyError(
            f"build-engine loads checkpoints with the training package ({e}); "
            f"install with: {extra_hint('train')}"
        ) from e
    try:
        from safetensors import SafetensorError
    except ImportError:  # pragma: no cover - transformers needs it
        SafetensorError = ValueError  # noqa: N806
    try:
        module, _ = load_checkpoint(ckpt)
    except (OSError, ValueError, SafetensorError) as e:  # transformers, safetensors: a damaged or foreign file
        why = (str(e).strip().splitlines() or [""])[0]
        raise ModelError(f"--model {ckpt}: cannot load the checkpoint ({type(e).__name__}: {why})") from e
    files = [p for p in ckpt.rglob("*") if p.is_file()]
    return _Source(module, load_model_info(ckpt), sha256_files(files, ckpt), ckpt / "tokenizer.json")


def _graph_source(folder: Path, int8_activations: str) -> _Source:
    """A built model folder (``--backend tensorrt``): the model rebuilt from its own graph."""
    from engines.build.from_graph import graph_module, source_graph

    if not (folder / "tokenizer.json").is_file():
        raise InputError(f"{folder} has no tokenizer.json (a Hugging Face fast tokenizer)")
    source = graph_module(source_graph(folder), int8_activations)
    # the checkpoint the graph was built from names the derived artifacts too (Triton compares it)
    sha = source.sidecar.source_sha256 or source.sidecar.artifact_sha256
    return _Source(source.module, load_model_info(folder), sha, folder / "tokenizer.json", source)


def _emulates_int8(folder: Path, args: argparse.Namespace) -> bool:
    """Whether the graph rebuilt from ``folder`` emulates int8 activations: by default when the
    folder serves a dynamic int8 graph (``--int8-activations``). The emulation is of dynamic
    per-row scales, so a graph with static activation scales is rebuilt with float activations."""
    from engines.build.from_graph import source_graph
    from engines.build.static_scales import has_static_scales
    from engines.sidecar import read_sidecar

    sidecar = read_sidecar(source_graph(folder))
    int8 = sidecar.precision == "int8"
    if args.int8_activations == "emulate" and not int8:
        raise InputError(f"--int8-activations emulate: {folder} serves no int8 graph (nothing to emulate)")
    if has_static_scales(sidecar):
        if args.int8_activations == "emulate":
            raise InputError(f"--int8-activations emulate: {folder}'s graph has static activation scales, and the "
                             "emulation is of dynamic per-row scales: use --int8-activations float")
        return False
    return int8 and args.int8_activations != "float"


def _model_metadata(source: _Source) -> dict[str, Any]:
    info = source.info
    meta = {**info.metadata, "labels": list(info.labels), "label_position": info.label_position,
            "window": info.window.to_dict()}
    if source.graph is not None:
        # the folder's streaming graph is not copied: the new folder serves whole windows
        meta.pop("stream_artifact", None)
        meta["built_from"] = {"folder": str(info.path), **source.graph.weights_from()}
    return meta


def check_build_arguments(args: argparse.Namespace) -> None:
    """What argparse's types cannot check alone, before anything is loaded or exported: the
    options that go together and the TensorRT profile."""
    from engines.base import EngineError
    from engines.build.tensorrt_build import TrtBuildOptions

    if args.graph_only and args.backend != "tensorrt":
        raise InputError("--graph-only stops a TensorRT build before the builder: use it with --backend tensorrt")
    if args.backend == "tensorrt" and args.precision == "int4":
        raise InputError("--precision int4 (4-bit weights, MatMulNBits) is an onnxruntime precision; "
                         "TensorRT builds fp32, fp16 or int8")
    if args.backend == "tensorrt":
        try:
            TrtBuildOptions(max_batch=args.max_batch, max_len=args.max_len).profile()
        except EngineError as e:
            raise InputError(f"--max-batch {args.max_batch} --max-len {args.max_len}: {e}") from None
    check_tensorrt_installed(args)


def ignored_options(args: argparse.Namespace, precision: str, needs_calibration: bool) -> list[str]:
    """The options given (not at their defaults, as :func:`add_arguments` sets them) that this
    build does not use."""
    defaults = argparse.ArgumentParser()
    add_arguments(defaults)
    tensorrt = args.backend == "tensorrt"
    ort_quantized = args.backend == "onnxruntime" and precision in ("int8", "int4")
    ort_int8 = ort_quantized and precision == "int8"
    used = {
        # a Triton repository's plan entry takes --max-batch from any build
        "max_batch": tensorrt or (args.triton_repo is not None and not args.no_triton_plan),
        "max_len": tensorrt, "timing_cache": tensorrt, "workspace_gb": tensorrt,
        "calibration_windows": needs_calibration,
        "no_per_channel": ort_int8, "full_range": ort_int8,
        "quantize_embeddings": ort_quantized, "no_stream_graph": ort_quantized,
    }
    return ["--" + dest.replace("_", "-") for dest, use in used.items()
            if not use and getattr(args, dest) != defaults.get_default(dest)]


def check_tensorrt_installed(args: argparse.Namespace) -> None:
    """``--backend tensorrt`` without ``--graph-only`` needs the TensorRT packages: refused before
    the export rather than after it."""
    from engines.registry import missing_dependencies

    if args.backend != "tensorrt" or args.graph_only:
        return
    missing = missing_dependencies("tensorrt")
    if missing:
        from engines.deps import install_hint

        raise DependencyError(f"--backend tensorrt builds a plan with {', '.join(missing)}, not installed here "
                              f"(install with: {install_hint(*missing)}); --graph-only stops before the "
                              "builder, with the graph it takes and parity figures, on a host without TensorRT")


def _parity_words(path: Path, args: argparse.Namespace) -> list:
    """The validation words for parity and calibration, read before any model is loaded."""
    data = read_word_labels(path)
    if not data.words:
        raise InputError(f"--parity-data {path} has no words (word<TAB>LABEL lines)")
    return data.words[: args.parity_lines + args.calibration_windows * _LINES_PER_WINDOW]


#: The files a build writes into its folder (what a rebuild there replaces; others, such as a
#: model card, stay; the stage is a folder).
_BUILT_FILE = re.compile(r"model(\.[\w-]+)*\.(onnx|plan)(\.json)?|tokenizer\.json|" + re.escape(METADATA_FILE))


def _stage_folder(out: Path) -> Path:
    """The folder a build writes before it becomes ``out`` (:func:`_publish`), on ``out``'s file
    system so that its files move by renames: inside ``out`` when it exists (it may be a mount
    point or a link to another disk), else beside it; one that an interrupted build left is
    removed first."""
    stage = out / ".building" if out.is_dir() else out.parent / f".{out.name}.building"
    try:
        if stage.exists():
            shutil.rmtree(stage)
        stage.mkdir(parents=True)
    except OSError as e:
        raise cannot_write(out, e, option="--out") from None
    return stage


def _publish(stage: Path, out: Path) -> None:
    """Make the whole build in ``stage`` the folder ``out``: a rename where ``out`` is new; else
    ``out``'s streampunct.json goes first (until the new one is in, the folder does not load as a
    model), then the files an earlier build left (no stale graph beside the new ones), and the new
    files come in with streampunct.json last. A build that stopped before this left ``out`` as it was."""
    if stage.parent != out:
        stage.rename(out)
        return
    (out / METADATA_FILE).unlink(missing_ok=True)
    for path in out.iterdir():
        if path.is_file() and _BUILT_FILE.fullmatch(path.name):
            path.unlink()
    for path in sorted(stage.iterdir(), key=lambda p: p.name == METADATA_FILE):
        os.replace(path, out / path.name)
    stage.rmdir()


def _run(args: argparse.Namespace) -> int:
    ckpt: Path = args.model
    if args.triton_repo is not None and args.out is None and is_built_model_folder(ckpt):
        if args.graph_only:
            raise InputError("--graph-only builds a folder: pass --out DIR (the repository is then written from it)")
        write_triton_repo_from_args(ckpt, args)
        return 0
    if not ckpt.is_dir():
        what = "is a file, not a checkpoint folder" if ckpt.exists() else "does not exist"
        raise InputError(f"--model {ckpt} {what} (a training checkpoint: streampunct train writes OUT/best; "
                         "with --backend tensorrt also a built model folder)")
    check_build_arguments(args)
    from_graph = args.backend == "tensorrt" and is_built_model_folder(ckpt)
    if not from_graph:
        check_checkpoint_folder(ckpt)
    if args.out is None:
        raise InputError("--out DIR is required: the folder to build" +
                         (" (the TensorRT folder of this model folder)" if from_graph else ""))
    if args.out.resolve().is_relative_to(ckpt.resolve()):  # before any work: it would write into its source
        where = "the folder" if args.out.resolve() == ckpt.resolve() else "inside the folder"
        raise InputError(f"--out {args.out} is {where} the model is read from: write the "
                         f"{'TensorRT ' if from_graph else 'built '}folder elsewhere")
    if args.out.exists() and not args.out.is_dir():
        raise InputError(f"--out {args.out} is a file, not a folder")
    if args.out.is_dir() and is_checkpoint_folder(args.out):
        raise InputError(f"--out {args.out} is a training checkpoint: the build would replace its "
                         f"streampunct.json and tokenizer.json; write the built folder elsewhere")
    if args.out.is_dir() and (run := training_run_entries(args.out)):
        raise InputError(f"--out {args.out} is a training run's folder (it holds {', '.join(run)}): the build "
                         f"would mix its graph, streampunct.json and tokenizer.json with the run's files; "
                         f"write the built folder elsewhere")
    if not from_graph and not (ckpt / "tokenizer.json").is_file():
        raise InputError(f"{ckpt} has no tokenizer.json (a Hugging Face fast tokenizer)")
    parity_path: Path | None = args.parity_data or default_parity_data()
    from training.data import is_test_set

    if parity_path is not None and is_test_set(parity_path):
        raise InputError("the IWSLT test sets are for final evaluation only: pass a validation file")
    emulate = _emulates_int8(ckpt, args) if from_graph else False
    if args.int8_activations is not None and not from_graph:
        raise InputError("--int8-activations applies to --backend tensorrt from a built model folder")
    precision = args.precision or ("int8" if args.backend == "onnxruntime" else "fp32" if emulate else "fp16")
    if emulate and precision != "fp32":
        advice = ("pass --int8-activations float for an fp16 plan" if precision == "fp16" else
                  f"{precision} is not a TensorRT precision (fp32, fp16)" if precision == "int4" else
                  f"pass --int8-activations float for an {precision} plan")
        raise InputError(f"--precision {precision} with emulated int8 activations: the emulated graph is float32 "
                         f"(its integer products are exact only there); {advice}")
    needs_calibration = precision != "fp32" and (args.backend == "tensorrt" or precision == "fp16")
    if parity_path is None and needs_calibration:
        raise InputError(f"{args.backend} {precision} needs validation text for calibration: "
                         "pass --parity-data word<TAB>LABEL file")

    ignored = ignored_options(args, precision, needs_calibration)
    if ignored:
        print(f"streampunct build-engine: warning: {', '.join(ignored)} {'does' if len(ignored) == 1 else 'do'} "
              f"nothing in this {args.backend} {precision} build; ignored", file=sys.stderr)
    words = _parity_words(parity_path, args) if parity_path is not None else []
    stage = _stage_folder(args.out)  # before the heavy work: an --out that cannot be written is said now
    try:
        return _build(args, ckpt, stage, from_graph=from_graph, emulate=emulate, precision=precision,
                      needs_calibration=needs_calibration, parity_path=parity_path, words=words)
    finally:
        shutil.rmtree(stage, ignore_errors=True)  # published (gone) or not: the out folder is as it was


def _build(args: argparse.Namespace, ckpt: Path, stage: Path, *, from_graph: bool, emulate: bool,
           precision: str, needs_calibration: bool, parity_path: Path | None, words: list) -> int:
    """Build into ``stage``, then publish it as ``args.out`` (:func:`_publish`)."""
    from engines.base import DependencyMissing
    from engines.build.builder import BuildConfig, build_model_folder
    from engines.build.tensorrt_build import TrtBuildOptions

    source = _graph_source(ckpt, "emulate" if emulate else "float") if from_graph else _checkpoint_source(ckpt)
    info = source.info

    parity = calibration = None
    if parity_path is None:
        log.warning("no validation text (no --parity-data, no dev2012 under $STREAMPUNCT_DATA or "
                    "../shared/data): parity is measured on random token ids, which read as no text, so "
                    "its label agreement says little (and the source graph is not compared); pass "
                    "--parity-data word<TAB>LABEL file for figures that do")
        parity_source = ""
    else:
        aligner = info.aligner()
        n_parity = min(len(words), args.parity_lines)
        parity = ParityWindows.of(aligner.offline_windows(words[:n_parity], info.window))
        if len(words) > n_parity:
            calibration = ParityWindows.of(
                aligner.offline_windows(words[n_parity:], info.window)
            ).head(args.calibration_windows)
        elif needs_calibration:
            calibration = parity  # short validation file: calibrate on the parity windows
        parity_source = f"{parity_path.name} (first {n_parity} words, {len(parity)} windows)"

    config = BuildConfig(
        backend=args.backend,
        precision=precision,
        opset=args.opset,
        per_channel=not args.no_per_channel,
        reduce_range=not args.full_range,
        quantize_embeddings=args.quantize_embeddings,
        trt=TrtBuildOptions(
            max_batch=args.max_batch,
            max_len=args.max_len,
            workspace_bytes=int(args.workspace_gb * (1 << 30)),
            timing_cache=args.timing_cache,
            tf32=not emulate,
        ),
        graph_only=args.graph_only,
    )
    if from_graph:
        emulated = (f", int8 activations emulated per row in {source.graph.emulated_layers} layers"
                    if source.graph.emulated_layers else "")
        print(f"rebuilt the model from {source.graph.path} ({source.graph.sidecar.precision}, weights "
              f"de-quantized{emulated}; {source.graph.encoder_config['model_type']} encoder, "
              f"{'with' if source.graph.has_case else 'no'} case head)")
    try:
        report = build_model_folder(
            source.module,
            stage,
            config=config,
            model_metadata=_model_metadata(source),
            source_sha256=source.source_sha256,
            parity_windows=parity,
            calibration_windows=calibration,
            copy_files={"tokenizer.json": source.tokenizer},
            parity_source=parity_source,
            source_graph=source.graph.path if source.graph is not None else None,
            weights_from=source.graph.weights_from() if source.graph is not None else None,
        )
    except DependencyMissing as e:
        missing = (getattr(e.__cause__, "name", None) or "").split(".")[0]
        if args.backend != "tensorrt" or args.graph_only or missing not in ("tensorrt", "pycuda"):
            raise
        graphs = ", ".join(sorted(p.name for p in stage.glob("*.onnx")))
        _publish(stage, args.out)  # the graphs the message points to
        raise DependencyError(f"{e}. The graphs before the builder are in {args.out} ({graphs or 'none'}); "
                              "--graph-only stops there, with parity figures") from e
    what = "graph for" if args.graph_only else "from"
    lines = [f"built {args.backend} {precision} {what} {ckpt} into {args.out}",
             *(line.replace(str(stage), str(args.out)) for line in report.summary_lines())]  # where it will be
    if args.graph_only:
        lines.append(f"stopped before the TensorRT builder (--graph-only): {report.artifact.name} is the graph "
                     "it takes; run the same command without --graph-only on the GPU host")
    if args.backend == "onnxruntime" and precision in ("int8", "int4") and not args.no_stream_graph:
        from engines.build.stream_graph import build_stream_artifact

        try:
            stream = build_stream_artifact(source.module, stage, source_sha256=source.source_sha256,
                                           quantize_embeddings=args.quantize_embeddings)
        except TypeError as e:  # neither a BERT- nor an MPNet-layout encoder
            lines.append(f"no streaming graph: {e}")
        else:
            lines.append(f"streaming graph (cached left context): {args.out / stream.name} "
                         f"({stream.stat().st_size / 1e6:.2f} MB)")
            if parity is not None:
                lines.append(_stream_parity(stage, stream, parity))
    _publish(stage, args.out)  # the folder is whole: only now does it replace what was there
    print("\n".join(lines))
    if args.triton_repo is not None:
        write_triton_repo_from_args(args.out, args)
    return 0


def _stream_parity(folder: Path, stream: Path, windows: ParityWindows) -> str:
    """The streaming graph against the folder's default artifact on the parity windows, each run
    whole (the streaming graph with no cache) and alone (as the server runs rows): the summary's
    line for it."""
    from engines.build.parity import parity_on_windows
    from engines.registry import load_engine, load_stream_engine, resolve_artifact

    whole = load_engine("onnxruntime", folder)
    try:
        streaming = load_stream_engine("onnxruntime", folder)
        try:
            report = parity_on_windows(whole.infer, streaming.infer, windows, batch_size=1)
        finally:
            streaming.close()
    finally:
        whole.close()
    return (f"  {stream.name:<20} vs {resolve_artifact('onnxruntime', folder).name} (whole windows, one a call): "
            f"label agreement {100 * report.label_agreement:.2f}% of {report.n_labels}")


def main(argv: list[str] | None = None) -> int:
    """``python -m training.build_engine``: the same command without the CLI frame."""
    from streampunct.cli import command_main

    return command_main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
