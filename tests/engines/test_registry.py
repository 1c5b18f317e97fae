"""Backend registry: names, lazy imports, missing-dependency messages, artifact choice."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest

from engines import deps, registry
from engines.base import ArtifactError, DependencyMissing, Engine, EngineError
from engines.registry import available_backends, load_engine, resolve_artifact


def test_unknown_backend_lists_the_valid_ones(tmp_path):
    with pytest.raises(EngineError, match="unknown engine backend 'openvino'; choose one of onnxruntime, tensorrt"):
        load_engine("openvino", tmp_path)


def test_missing_tensorrt_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "is_installed", lambda m: m not in ("tensorrt", "pycuda"))
    with pytest.raises(DependencyMissing) as err:
        load_engine("tensorrt", tmp_path)
    message = str(err.value)
    assert "the tensorrt engine backend needs tensorrt, pycuda" in message
    assert message.endswith("pip install -e '.[tensorrt]' in the streampunct checkout "
                            "(or: pip install 'tensorrt' 'pycuda')")  # both packages, not the first alone
    assert isinstance(err.value, ImportError)


def test_missing_onnxruntime_names_the_package(monkeypatch, tmp_path):
    monkeypatch.setattr(registry, "is_installed", lambda m: m != "onnxruntime")
    with pytest.raises(DependencyMissing, match=r"needs onnxruntime.*pip install onnxruntime"):
        load_engine("onnxruntime", tmp_path)
    assert "onnxruntime" not in available_backends()


def test_require_reports_failed_import(monkeypatch):
    monkeypatch.setitem(sys.modules, "modelopt", None)  # import fails like a missing package
    with pytest.raises(DependencyMissing, match=r"graph prep needs .*'modelopt'.*nvidia-modelopt\[onnx\]"):
        deps.require("modelopt", feature="graph prep")


def test_available_backends_reflect_installed_packages():
    names = available_backends()
    assert "onnxruntime" in names
    assert ("torch" in names) == all(deps.is_installed(m) for m in ("torch", "transformers", "onnx"))
    assert ("tensorrt" in names) == (deps.is_installed("tensorrt") and deps.is_installed("pycuda"))


def test_importing_engines_imports_no_backend():
    import subprocess

    code = (
        "import sys, engines, engines.registry; "
        "print(sorted(m for m in ('torch','onnx','onnxruntime','tensorrt','streampunct','training') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _folder(tmp_path, names):
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    return tmp_path


def test_artifact_order_int8_then_fp32(tmp_path):
    folder = _folder(tmp_path, ["model.onnx"])
    assert resolve_artifact("onnxruntime", folder).name == "model.onnx"
    _folder(tmp_path, ["model.int8.onnx"])
    assert resolve_artifact("onnxruntime", folder).name == "model.int8.onnx"


def test_streampunct_json_artifact_wins(tmp_path):
    folder = _folder(tmp_path, ["model.onnx", "model.int8.onnx"])
    (folder / "streampunct.json").write_text(json.dumps({"artifact": "model.onnx"}))
    assert resolve_artifact("onnxruntime", folder).name == "model.onnx"
    # A plan named there does not apply to onnxruntime, and vice versa.
    (folder / "streampunct.json").write_text(json.dumps({"artifact": "model.fp16.plan"}))
    assert resolve_artifact("onnxruntime", folder).name == "model.int8.onnx"


def test_streampunct_json_naming_a_missing_file(tmp_path):
    folder = _folder(tmp_path, ["model.onnx"])
    (folder / "streampunct.json").write_text(json.dumps({"artifact": "model.int8.onnx"}))
    with pytest.raises(ArtifactError, match="names artifact 'model.int8.onnx', which is missing"):
        resolve_artifact("onnxruntime", folder)
    (folder / "model.int8.onnx").mkdir()
    with pytest.raises(ArtifactError, match="names artifact 'model.int8.onnx', which is a folder, not a file$"):
        resolve_artifact("onnxruntime", folder)
    (folder / "model.int8.onnx").rmdir()
    (folder / "model.int8.onnx").symlink_to(tmp_path / "gone.onnx")
    with pytest.raises(ArtifactError, match="names artifact 'model.int8.onnx', which is a link to nothing$"):
        resolve_artifact("onnxruntime", folder)


def test_no_artifact_says_what_was_looked_for(tmp_path):
    with pytest.raises(ArtifactError, match="looked for model.int8.onnx, model.int4.onnx, model.onnx.*build-engine"):
        resolve_artifact("onnxruntime", tmp_path)
    with pytest.raises(ArtifactError, match="model folder .* does not exist"):
        resolve_artifact("onnxruntime", tmp_path / "nope")
    with pytest.raises(ArtifactError, match="no artifact 'other.onnx'"):
        resolve_artifact("onnxruntime", tmp_path, "other.onnx")


def test_load_engine_onnxruntime_uses_streampunct_json(tiny_export, tmp_path):
    folder = tmp_path / "m"
    shutil.copytree(tiny_export.path.parent, folder)
    engine = load_engine("onnxruntime", folder, intra_op_threads=1)
    try:
        assert isinstance(engine, Engine)
        assert engine.name == "onnxruntime"
        assert engine.io_spec().artifact == "model.onnx"
        out = engine.infer(np.array([[2, 5, 6, 3]]), np.ones((1, 4), dtype=np.int64))
        assert out.shape == (1, 4, 4) and out.dtype == np.float32
    finally:
        engine.close()


def test_unknown_option_is_named(tiny_export):
    with pytest.raises(EngineError, match="unknown option.* threads for the onnxruntime backend; valid: .*intra_op_threads"):
        load_engine("onnxruntime", tiny_export.path.parent, threads=2)


@pytest.mark.parametrize("options, message", [
    ({"intra_op_threads": "abc"}, "option intra_op_threads of the onnxruntime backend must be an integer, got 'abc'"),
    ({"intra_op_threads": True}, "must be an integer, got True"),
    ({"allow_spinning": 1}, "option allow_spinning of the onnxruntime backend must be true or false, got 1"),
    ({"graph_optimization": 3}, "must be a string, got 3"),
])
def test_mistyped_option_is_named_with_its_type(options, message):
    from engines.ort_engine import OrtOptions

    with pytest.raises(EngineError) as exc:
        registry.make_options(OrtOptions, options, "onnxruntime")
    assert message in str(exc.value)
    fine = registry.make_options(OrtOptions, {"intra_op_threads": None, "providers": ["CPUExecutionProvider"],
                                              "allow_spinning": True}, "onnxruntime")
    assert fine.providers == ("CPUExecutionProvider",) and fine.allow_spinning


@pytest.mark.parametrize("backend, options, want", [
    ("onnxruntime", {"providers": "CPUExecutionProvider"}, {"providers": ("CPUExecutionProvider",)}),
    ("onnxruntime", {"providers": "CUDAExecutionProvider, CPUExecutionProvider"},
     {"providers": ("CUDAExecutionProvider", "CPUExecutionProvider")}),
    ("onnxruntime", {"intra_op_threads": "2", "allow_spinning": "True", "graph_optimization": "basic"},
     {"intra_op_threads": 2, "allow_spinning": True, "graph_optimization": "basic"}),
    ("onnxruntime", {"intra_op_threads": "none"}, {"intra_op_threads": None}),
    ("triton", {"model_version": "1", "model_name": "7", "timeout_s": "5", "pad_multiple": "8"},
     {"model_version": "1", "model_name": "7", "timeout_s": 5.0, "pad_multiple": 8}),
    ("fake", {"batch_ms": "1", "sleep": "false", "fail_token": "12"},
     {"batch_ms": 1.0, "sleep": False, "fail_token": 12}),
])
def test_option_text_is_converted_by_the_options_type(backend, options, want):
    """``--engine-option`` values arrive as text (OptionText) and take their option's type:
    a string stays a string, a list splits on commas."""
    from engines.base import OptionText

    cls = {"onnxruntime": "engines.ort_engine:OrtOptions", "triton": "engines.triton_engine:TritonOptions",
           "fake": "engines.fake:FakeOptions"}[backend].split(":")
    options_cls = getattr(__import__(cls[0], fromlist=[cls[1]]), cls[1])
    made = registry.make_options(options_cls, {k: OptionText(v) for k, v in options.items()}, backend)
    for name, value in want.items():
        got = getattr(made, name)
        assert got == value and type(got) is type(value), (name, got)


@pytest.mark.parametrize("options, message", [
    ({"intra_op_threads": "two"}, "option intra_op_threads of the onnxruntime backend must be an integer, got 'two'"),
    ({"allow_spinning": "yes"}, "option allow_spinning of the onnxruntime backend must be true or false, got 'yes'"),
    ({"inter_op_threads": "1.5"}, "must be an integer, got '1.5'"),
])
def test_option_text_of_the_wrong_type_is_one_line(options, message):
    from engines.base import OptionText
    from engines.ort_engine import OrtOptions

    with pytest.raises(EngineError) as exc:
        registry.make_options(OrtOptions, {k: OptionText(v) for k, v in options.items()}, "onnxruntime")
    assert str(exc.value) == message if message.startswith("option") else message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_shipped_model_loads():
    from .conftest import REPO

    folder = REPO / "models" / "default"
    if not any(folder.glob("*.onnx")):
        pytest.skip(f"no shipped model in {folder} yet")
    engine = load_engine("onnxruntime", folder)
    try:
        spec = engine.io_spec()
        assert spec.num_labels == 4
        ids = np.array([[101, 7592, 2088, 102]], dtype=np.int64)
        assert engine.infer(ids, np.ones_like(ids)).shape == (1, 4, spec.num_labels)
    finally:
        engine.close()


def test_the_registry_decides_the_stream_mode(tmp_path):
    """``stream_shape``: the runtime's one question about cached left context (serve and the
    simulations ask it through the registry, never a backend module)."""
    from engines.model_meta import read_model_meta
    from engines.sidecar import read_sidecar
    from engines.stream_spec import cache_shape

    from .conftest import REPO

    shipped = REPO / "models" / "default"
    graph = "model.stream.int8.onnx"
    if not (shipped / f"{graph}.json").is_file() or not (shipped / "model.int8.onnx.json").is_file():
        pytest.skip(f"no shipped streaming graph in {shipped}")
    shape = cache_shape(read_sidecar(shipped / graph).inputs)
    assert shape is not None and len(shape) == 3

    def folder(name, **meta):
        d = tmp_path / name
        d.mkdir()
        for sidecar in (f"{graph}.json", "model.int8.onnx.json"):
            shutil.copy(shipped / sidecar, d / sidecar)
        (d / "streampunct.json").write_text(json.dumps(meta))
        return d

    on = folder("on", stream_artifact=graph)
    off = folder("off", stream_artifact=graph, stream_cache=False)
    none = folder("none")
    whole = folder("whole", stream_artifact="model.int8.onnx")
    assert registry.stream_shape("onnxruntime", on) == registry.stream_shape("onnxruntime", on, "on") == shape
    assert registry.stream_shape("onnxruntime", on, "off") is None
    assert registry.stream_shape("onnxruntime", off, "auto") is None  # the folder switches it off
    assert registry.stream_shape("onnxruntime", off, "on") == shape
    assert registry.stream_shape("onnxruntime", none, "auto") is None
    assert registry.streaming_backends() == ("onnxruntime", "torch")
    assert registry.stream_shape("torch", on) == registry.stream_shape("torch", on, "on") == shape
    for backend in ("tensorrt", "fake", "triton"):  # auto: they run whole windows
        assert registry.stream_shape(backend, on, "auto") is None
    # the caller's parsed streampunct.json is used as given
    assert registry.stream_shape("onnxruntime", on, "auto", meta=read_model_meta(off)) is None
    assert registry.stream_shape("onnxruntime", none, "auto", meta=read_model_meta(on)) == shape

    with pytest.raises(registry.StreamModeError, match="--stream-cache on needs a model folder with a streaming "
                                                       "graph") as err:
        registry.stream_shape("onnxruntime", none, "on")
    assert str(none / "streampunct.json") in str(err.value) and isinstance(err.value, ArtifactError)
    with pytest.raises(registry.StreamModeError, match=r"--stream-cache on needs an engine that runs a streaming "
                                                       r"graph \(onnxruntime, torch\), not fake"):
        registry.stream_shape("fake", on, "on")
    with pytest.raises(registry.StreamModeError, match=r"model.int8.onnx is not a streaming graph \(no past_kv"):
        registry.stream_shape("onnxruntime", whole, "on")
    with pytest.raises(EngineError, match="stream cache must be one of auto, on, off, not 'yes'"):
        registry.stream_shape("onnxruntime", on, "yes")
    with pytest.raises(registry.StreamModeError, match="the fake engine backend runs no streaming graph"):
        registry.load_stream_engine("fake", on)


def test_the_registry_opens_the_streaming_graph_and_counts_cores(monkeypatch, tmp_path):
    pytest.importorskip("onnxruntime")
    import engines.ort_engine

    opened = []
    monkeypatch.setattr(engines.ort_engine, "open_stream_engine",
                        lambda model_dir, options: opened.append((model_dir, options)) or "graph")
    assert registry.load_stream_engine("onnxruntime", str(tmp_path), intra_op_threads=2) == "graph"
    assert opened == [(tmp_path, {"intra_op_threads": 2})]
    assert registry.physical_cores() == engines.ort_engine.physical_cores() >= 1
    monkeypatch.setattr(engines.ort_engine, "physical_cores", lambda: 7)
    assert registry.physical_cores() == 7


def test_engine_threads_names_each_backends_own_per_engine_option():
    """One engine's thread cap where the backend has one (ONNX Runtime's, an option its
    options class takes); none where threads are process-wide (torch) or not the host's."""
    import dataclasses
    import importlib.util

    assert registry.engine_threads("onnxruntime", 1) == {"intra_op_threads": 1}
    assert registry.engine_threads("onnxruntime", 3) == {"intra_op_threads": 3}
    for backend in ("torch", "tensorrt", "fake", "triton"):
        assert registry.engine_threads(backend, 1) == {}
    from engines.ort_engine import OrtOptions
    assert registry.make_options(OrtOptions, registry.engine_threads("onnxruntime", 2), "onnxruntime").intra_op_threads == 2
    for b in registry.BACKENDS.values():  # every declared option is a real one of the backend's options
        if b.threads_option and all(importlib.util.find_spec(r.split(".")[0]) for r in b.requires):
            module = importlib.import_module(b.module)
            names = {f.name for cls in vars(module).values() if dataclasses.is_dataclass(cls) and isinstance(cls, type)
                     for f in dataclasses.fields(cls)}
            assert b.threads_option in names, b.name
    with pytest.raises(ValueError, match="threads must be >= 1, got 0"):
        registry.engine_threads("onnxruntime", 0)
    with pytest.raises(EngineError, match="unknown engine backend 'onnx'"):
        registry.engine_threads("onnx", 1)


@pytest.mark.parametrize("option", ["intra_op_threads", "inter_op_threads"])
def test_an_engine_s_threads_are_bounded_by_the_host_s_cores(option, monkeypatch):
    """A typo (16000 for 16) is refused with the bound, rather than starting threads until the
    host gives out (the probe's 10,000 never got ready)."""
    import engines.host
    from engines.ort_engine import OrtOptions

    monkeypatch.setattr(engines.host, "usable_cores", lambda: 2)
    assert getattr(OrtOptions(**{option: 8}), option) == 8
    with pytest.raises(EngineError, match=f"^{option} must be at most 8 on this host \\(4 per usable core\\), got 9$"):
        OrtOptions(**{option: 9})
    with pytest.raises(EngineError, match=f"^{option} must be >= 1, got 0$"):
        OrtOptions(**{option: 0})


def test_the_torch_engine_s_threads_are_bounded_too(monkeypatch):
    pytest.importorskip("torch")
    import engines.host
    from engines.torch_backend import TorchOptions

    monkeypatch.setattr(engines.host, "usable_cores", lambda: 1)
    with pytest.raises(EngineError, match="^threads must be at most 4 on this host"):
        TorchOptions(threads=5)


# -- model folder checks ------------------------------------------------------------------


def _tiny_folder(tiny_export, tmp_path, **meta):
    """A copy of the tiny export's folder with ``meta`` merged into its streampunct.json."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_export.path.parent, folder)
    path = folder / "streampunct.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **meta}))
    return folder


def test_a_missing_stream_artifact_is_named_missing(tiny_export, tmp_path):
    folder = _tiny_folder(tiny_export, tmp_path, stream_artifact="model.stream.int8.onnx")
    with pytest.raises(ArtifactError) as exc:
        registry.stream_shape("onnxruntime", folder, "on")
    assert str(exc.value) == (f"{folder / 'streampunct.json'} names stream_artifact 'model.stream.int8.onnx', "
                              "which is missing")


@pytest.mark.parametrize("key", ["artifact", "stream_artifact"])
def test_a_named_file_outside_the_folder_is_refused(tiny_export, tmp_path, key):
    from streampunct.errors import ModelError
    from streampunct.model import load_model_info

    outside = "../../elsewhere/model.onnx"
    folder = _tiny_folder(tiny_export, tmp_path, **{key: outside})
    with pytest.raises(ModelError, match=f"{key} '../../elsewhere/model.onnx' is outside the model folder"):
        load_model_info(folder)
    with pytest.raises(ArtifactError, match="is outside the model folder"):
        if key == "artifact":
            resolve_artifact("onnxruntime", folder)
        else:
            registry.stream_shape("onnxruntime", folder, "on")
    with pytest.raises(ArtifactError, match="artifact '../model/model.onnx' is outside the model folder"):
        resolve_artifact("onnxruntime", folder, "../model/model.onnx")
    assert registry.folder_file(folder, "sub/../model.onnx") == folder / "sub/../model.onnx"


@pytest.mark.parametrize("key", ["window", "stream_window"])
def test_a_window_beyond_the_encoders_positions_is_refused_at_load(tiny_export, tmp_path, key):
    from streampunct.errors import ModelError
    from streampunct.model import load_model_info

    folder = _tiny_folder(tiny_export, tmp_path, **{key: {"size": 600, "left": 40, "right": 10}})
    with pytest.raises(ModelError) as exc:
        load_model_info(folder)
    assert f"{key} size 600 is too large: the model sees size + 2 tokens and has 512 positions" in str(exc.value)
    assert load_model_info(_tiny_folder(tiny_export, tmp_path / "ok", window={"size": 510, "left": 40,
                                                                             "right": 10})).window.size == 510


@pytest.mark.parametrize("key", ["window", "stream_window"])
def test_a_window_with_nothing_to_decide_is_refused_at_load(tiny_export, tmp_path, key):
    """Context on both sides as wide as the window (or wider) leaves it no token to label."""
    from streampunct.errors import ModelError
    from streampunct.model import load_model_info

    folder = _tiny_folder(tiny_export, tmp_path, **{key: {"size": 126, "left": 100, "right": 100}})
    with pytest.raises(ModelError) as exc:
        load_model_info(folder)
    assert str(exc.value).endswith(f"{key} size 126 leaves no tokens to decide between left 100 and right 100 "
                                   "(size must be > left + right)")
    ok = _tiny_folder(tiny_export, tmp_path / "ok", **{key: {"size": 126, "left": 100, "right": 25}})
    assert getattr(load_model_info(ok), key).step == 1


def test_the_decoder_reads_the_tokenizer_before_loading_the_engine(tiny_export, tmp_path, monkeypatch):
    from streampunct.core import decoder

    folder = _tiny_folder(tiny_export, tmp_path)
    (folder / "tokenizer.json").write_text("{not a tokenizer")
    loaded = []
    monkeypatch.setattr(decoder, "load_engine", lambda *a, **k: loaded.append(a) or pytest.fail("engine loaded"))
    with pytest.raises(Exception):  # noqa: B017 (the tokenizer's error, whatever its type)
        decoder.OfflineDecoder.from_model_dir(folder)
    assert loaded == []


def test_the_decoder_closes_its_engine_when_it_cannot_be_made(tiny_export, tmp_path, monkeypatch):
    from streampunct.core import decoder

    closed = []

    class Engine:
        def close(self):
            closed.append(True)

    def refuse(self, *args, **kwargs):
        raise ValueError("cannot be made")

    monkeypatch.setattr(decoder, "load_engine", lambda *a, **k: Engine())
    monkeypatch.setattr(decoder.OfflineDecoder, "__init__", refuse)
    with pytest.raises(ValueError, match="cannot be made"):
        decoder.OfflineDecoder.from_model_dir(tiny_export.path.parent)
    assert closed == [True]
