"""The triton engine backend, the Triton model repository and a real Triton server.

The repository's ``config.pbtxt`` files are parsed with Triton's own schema
(``tritonclient.grpc.model_config_pb2``). The server is NVIDIA's PyTriton (``tritonserver``
with a Python model running the folder's graph, :mod:`engines.build.triton_pytriton`), started
once for the module on free loopback ports; those tests skip where ``tritonclient`` or a
PyTriton environment (``scripts/setup_triton_server.sh``) is missing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engines.base import ArtifactError, EngineError

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MODEL = REPO / "models" / "default"
TEXT = ("so what do we do about it i think there are three things we can do first we can measure it "
        "how many of you have ever been to new york do you remember the first time you saw it "
        "it was amazing wasnt it and then we went home and forgot all about it")


def _config(text: str):
    pytest.importorskip("tritonclient.grpc")
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    return text_format.Parse(text, model_config_pb2.ModelConfig())


def _parameters(config) -> dict[str, str]:
    return {k: v.string_value for k, v in config.parameters.items()}


# -- the repository ---------------------------------------------------------------------------


def test_repository_entries_follow_tritons_schema(tiny_export, tmp_path):
    from engines.build.triton_repo import TritonRepoConfig, write_triton_repo

    folder = tiny_export.path.parent
    repo = write_triton_repo(folder, tmp_path / "repo", TritonRepoConfig(max_batch=16, max_queue_delay_us=500,
                                                                         intra_op_threads=2))
    onnx = _config((tmp_path / "repo" / "streampunct" / "config.pbtxt").read_text())
    assert (onnx.name, onnx.platform, onnx.max_batch_size) == ("streampunct", "onnxruntime_onnx", 16)
    assert [(i.name, i.data_type, list(i.dims)) for i in onnx.input] == [
        ("input_ids", 9, [-1]), ("attention_mask", 9, [-1])]  # TYPE_INT64; the batch axis is Triton's
    assert [(o.name, o.data_type, list(o.dims)) for o in onnx.output] == [("logits", 11, [-1, 4])]  # TYPE_FP32
    assert onnx.dynamic_batching.max_queue_delay_microseconds == 500
    assert onnx.instance_group[0].kind == onnx.instance_group[0].KIND_CPU
    assert _parameters(onnx) == {
        "streampunct_source_sha256": tiny_export.sidecar.source_sha256 or "",
        "streampunct_precision": "fp32", "streampunct_rows_independent": "true",
        "intra_op_thread_count": "2", "inter_op_thread_count": "1"}
    assert (tmp_path / "repo" / "streampunct" / "1" / "model.onnx").read_bytes() == tiny_export.path.read_bytes()
    plan = _config((tmp_path / "repo" / "streampunct_trt" / "config.pbtxt").read_text())
    assert (plan.name, plan.platform, plan.default_model_filename) == ("streampunct_trt", "tensorrt_plan", "model.plan")
    assert plan.instance_group[0].kind == plan.instance_group[0].KIND_GPU
    assert repo.plan_source is None and any("no plan" in note for note in repo.notes)
    assert not (tmp_path / "repo" / "streampunct_trt" / "1" / "model.plan").exists()


def test_gpu_instances_and_a_plan_with_its_profile(tiny_export, tmp_path):
    from engines.build.triton_repo import TritonRepoConfig, write_triton_repo
    from engines.sidecar import read_sidecar, write_sidecar

    folder = tmp_path / "model"
    folder.mkdir()
    for f in tiny_export.path.parent.iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    plan = folder / "model.fp16.plan"
    plan.write_bytes(b"not a real plan")
    write_sidecar(read_sidecar(folder / "model.onnx").replace(
        artifact=plan.name, backend="tensorrt", precision="fp16",
        build={"profiles": [{"input_ids": {"min": [1, 8], "opt": [8, 128], "max": [24, 256]}}]}), plan)
    write_triton_repo(folder, tmp_path / "repo", TritonRepoConfig(model_name="punct", kind="gpu", instances=2,
                                                                  gpus=(0, 1)))
    onnx = _config((tmp_path / "repo" / "punct" / "config.pbtxt").read_text())
    group = onnx.instance_group[0]
    assert (group.kind, group.count, list(group.gpus)) == (group.KIND_GPU, 2, [0, 1])
    trt = _config((tmp_path / "repo" / "punct_trt" / "config.pbtxt").read_text())
    assert trt.max_batch_size == 24  # the plan's profile, not the ONNX entry's 64
    assert _parameters(trt)["streampunct_min_len"] == "8"
    assert (tmp_path / "repo" / "punct_trt" / "1" / "model.plan").read_bytes() == b"not a real plan"


def test_repository_options_are_checked():
    from engines.build.triton_repo import TritonRepoConfig

    for bad in ({"kind": "tpu"}, {"model_name": "a b"}, {"max_batch": 0}, {"intra_op_threads": 0}):
        with pytest.raises(EngineError):
            TritonRepoConfig(**bad)


@pytest.mark.parametrize("name", [".", "..", "...", ".hidden", "a/b", "../x"])
def test_a_name_outside_the_repository_is_refused(name):
    from engines.build.triton_repo import TritonRepoConfig

    with pytest.raises(EngineError, match="model name"):
        TritonRepoConfig(model_name=name)
    assert TritonRepoConfig(model_name="punct.v1-2").plan_name == "punct.v1-2_trt"


def test_an_entry_is_only_ever_removed_inside_the_repository(tmp_path):
    from engines.build.triton_repo import _fresh_entry

    root = tmp_path / "repo"
    (root / "streampunct" / "1").mkdir(parents=True)
    (tmp_path / "keep").write_text("x")
    assert _fresh_entry(root, "streampunct") == root / "streampunct" and not (root / "streampunct").exists()
    for name in ("..", ".", "../keep"):
        with pytest.raises(EngineError, match="is not a folder directly inside"):
            _fresh_entry(root, name)
    assert (tmp_path / "keep").is_file() and root.is_dir()


def test_build_engine_refuses_a_dot_name_and_deletes_nothing(tiny_export, tmp_path, capsys):
    from streampunct.cli import main

    repo = tmp_path / "parent" / "repo"
    repo.mkdir(parents=True)
    (tmp_path / "parent" / "sibling.txt").write_text("keep me")
    for name in ("..", "."):
        assert main(["build-engine", "--model", str(tiny_export.path.parent), "--triton-repo", str(repo),
                     "--triton-name", name]) == 2
        assert "model name" in capsys.readouterr().err
    assert (tmp_path / "parent" / "sibling.txt").read_text() == "keep me" and repo.is_dir()


def test_a_placeholder_plan_entry_has_build_engines_defaults(tiny_export, tmp_path):
    """Without a plan the TensorRT entry says what build-engine's default plan will be: the
    profile's shortest sequence (the client pads up to it) and its precision (fp16 from an fp32
    graph, fp32 from a dynamic int8 one: its activations are emulated)."""
    from engines.build.triton_repo import default_plan_precision, write_triton_repo
    from engines.sidecar import read_sidecar, write_sidecar

    folder = tiny_export.path.parent
    repo = write_triton_repo(folder, tmp_path / "fp32")
    trt = _config((tmp_path / "fp32" / "streampunct_trt" / "config.pbtxt").read_text())
    assert _parameters(trt)["streampunct_min_len"] == "8"
    assert _parameters(trt)["streampunct_precision"] == "fp16"
    note = next(n for n in repo.notes if "no plan" in n)
    assert f"build-engine --backend tensorrt --model {folder} --max-batch 32 --out DIR" in note
    assert "copy DIR's model.fp16.plan" in note and "training checkpoint" not in note

    int8 = tmp_path / "int8"
    int8.mkdir()
    for f in folder.iterdir():
        (int8 / f.name.replace("model.onnx", "model.int8.onnx")).write_bytes(f.read_bytes())
    sidecar = read_sidecar(folder / "model.onnx").replace(
        artifact="model.int8.onnx", precision="int8", recipe={"method": "onnxruntime.quantization.quantize_dynamic"})
    write_sidecar(sidecar, int8 / "model.int8.onnx")
    assert default_plan_precision(sidecar) == "fp32"
    repo = write_triton_repo(int8, tmp_path / "r8")
    trt = _config((tmp_path / "r8" / "streampunct_trt" / "config.pbtxt").read_text())
    assert _parameters(trt)["streampunct_precision"] == "fp32" and _parameters(trt)["streampunct_min_len"] == "8"
    assert "copy DIR's model.fp32.plan" in next(n for n in repo.notes if "no plan" in n)
    # graphs a TensorRT build prepared (--graph-only) keep their precision, and the note says to rerun it
    qdq = sidecar.replace(precision="int8", recipe={"method": "modelopt.onnx.quantization.quantize (explicit Q/DQ)"})
    assert default_plan_precision(qdq) == "int8"
    assert default_plan_precision(sidecar.replace(precision="fp16", recipe={})) == "fp16"
    emulated = sidecar.replace(precision="fp32", recipe={"weights_from": {"activations": "uint8 per row"}})
    assert default_plan_precision(emulated) == "fp32"
    assert default_plan_precision(sidecar.replace(precision="int4", recipe={})) == "fp16"


def test_the_streaming_graph_gives_a_whole_window_graph_with_the_same_logits(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    import onnxruntime as ort

    from engines.build.stream_graph import export_stream_onnx
    from engines.build.triton_repo import whole_window_graph
    from engines.ort_engine import OrtOptions, OrtStreamEngine
    from tests.engines.conftest import tiny_two_head_model

    torch.set_num_threads(1)
    model = tiny_two_head_model(tmp_path / "bert", transformers.BertConfig(
        vocab_size=120, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
        max_position_embeddings=64))
    stream = export_stream_onnx(model, tmp_path / "model.stream.onnx", source_sha256="abc").path
    whole = whole_window_graph(stream, tmp_path / "whole.onnx")
    session = ort.InferenceSession(str(whole), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask"]
    assert [o.name for o in session.get_outputs()] == ["logits", "case_logits"]
    ids = np.array([[2, 5, 7, 9, 11, 13, 3], [2, 8, 9, 3, 0, 0, 0]], dtype=np.int64)
    mask = (np.arange(7)[None] < np.array([[7], [4]])).astype(np.int64)
    logits, case = OrtStreamEngine(stream, OrtOptions(intra_op_threads=1)).infer_heads(ids, mask)
    got = session.run(None, {"input_ids": ids, "attention_mask": mask})
    np.testing.assert_array_equal(got[0], logits)
    np.testing.assert_array_equal(got[1], case)


def test_build_engine_writes_the_repository_for_a_built_model_folder(tiny_export, tmp_path, capsys):
    from streampunct.cli import main

    assert main(["build-engine", "--model", str(tiny_export.path.parent), "--triton-repo", str(tmp_path / "r"),
                 "--triton-kind", "gpu", "--triton-max-batch", "8", "--no-triton-plan"]) == 0
    config = _config((tmp_path / "r" / "streampunct" / "config.pbtxt").read_text())
    assert config.max_batch_size == 8 and config.instance_group[0].kind == config.instance_group[0].KIND_GPU
    assert not (tmp_path / "r" / "streampunct_trt").exists()
    assert "wrote the Triton model repository" in capsys.readouterr().out


# -- the backend without a server -------------------------------------------------------------


def test_the_backend_is_registered_and_its_options_checked():
    from engines.base import make_options
    from engines.registry import BACKENDS
    from engines.triton_engine import TritonOptions

    assert BACKENDS["triton"].suffixes == ()  # reads no artifact: the graph is on the server
    with pytest.raises(EngineError, match="unknown option"):
        make_options(TritonOptions, {"host": "x"}, "triton")
    for bad in ({"url": "grpc://h:8001"}, {"pad_multiple": 0}, {"timeout_s": 0}):
        with pytest.raises(EngineError):
            TritonOptions(**bad)


def test_a_missing_client_names_the_extra(monkeypatch):
    from engines import registry
    from engines.base import DependencyMissing

    monkeypatch.setattr(registry, "is_installed", lambda module: not module.startswith("tritonclient"))
    with pytest.raises(DependencyMissing, match=r"pip install -e '\.\[triton\]' in the streampunct checkout"):
        registry.load_engine("triton", DEFAULT_MODEL)


def test_no_server_is_an_artifact_error_after_the_ready_timeout(caplog):
    pytest.importorskip("tritonclient.grpc")
    import logging
    import time

    from engines.build.triton_pytriton import free_port
    from engines.registry import load_engine

    caplog.set_level(logging.WARNING, logger="engines")  # what punctuate shows: WARNING and up
    url = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ArtifactError, match="not ready after 1 s"):
        load_engine("triton", DEFAULT_MODEL, url=url, ready_timeout_s=1)
    assert time.monotonic() - started < 30
    # the wait is said once, when it begins, not only when it gives up
    waits = [r.getMessage() for r in caplog.records if "waiting up to" in r.getMessage()]
    assert len(waits) == 1 and waits[0].startswith(f"Triton at {url} is not ready (")
    assert waits[0].endswith("): waiting up to 1 s (engine option ready_timeout_s)")


def test_the_ready_wait_gives_up_when_its_load_is_cancelled():
    """A server shut down (Ctrl-C) while Triton is not ready yet exits at once, not after the
    rest of ready_timeout_s: the wait ends when its load is cancelled (engines.base.cancellable_load)."""
    pytest.importorskip("tritonclient.grpc")
    import threading

    from engines.base import LoadCancelled, cancellable_load
    from engines.build.triton_pytriton import free_port
    from engines.registry import load_engine

    cancel, outcome = threading.Event(), []
    url = f"127.0.0.1:{free_port()}"

    def load():
        with cancellable_load(cancel):
            try:
                load_engine("triton", DEFAULT_MODEL, url=url, ready_timeout_s=600)
            except LoadCancelled as e:
                outcome.append(str(e))

    thread = threading.Thread(target=load)
    thread.start()
    cancel.set()  # at any point of the wait: its next poll gives up
    thread.join(30)
    assert not thread.is_alive()
    assert outcome == [f"Triton at {url}: gave up waiting for it to be ready (shutting down)"]


def test_each_readiness_call_is_bounded_by_the_wait(monkeypatch):
    """A server that accepts the connection and never answers must not hold a call past the
    wait: every readiness call carries a client_timeout within what is left of it."""
    grpc = pytest.importorskip("tritonclient.grpc")
    from engines.registry import load_engine

    bounds: list[float] = []

    class SilentClient:
        def __init__(self, url):
            pass

        def is_server_ready(self, client_timeout=None):
            bounds.append(client_timeout)
            return False

        def close(self):
            pass

    monkeypatch.setattr(grpc, "InferenceServerClient", SilentClient)
    with pytest.raises(ArtifactError, match="not ready after 1 s"):
        load_engine("triton", DEFAULT_MODEL, url="127.0.0.1:1", ready_timeout_s=1)
    assert bounds and all(b is not None and 0.5 <= b <= 5.0 for b in bounds)


# -- a real Triton server -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def triton_server(tmp_path_factory):
    pytest.importorskip("tritonclient.grpc")
    from engines.build.triton_pytriton import PyTritonProcess, server_python

    if not (DEFAULT_MODEL / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL}")
    python = server_python()
    if python is None:
        pytest.skip("no PyTriton environment with numpy < 2 (bash scripts/setup_triton_server.sh)")
    server = PyTritonProcess(DEFAULT_MODEL, python=python, max_batch=4, threads=1,
                             log_path=tmp_path_factory.mktemp("triton") / "triton.log")
    try:
        server.start()
    except RuntimeError as e:
        server.stop()
        pytest.fail(str(e))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def triton_punctuator(triton_server):
    from streampunct.core.decoder import OfflineDecoder

    punct = OfflineDecoder.from_model_dir(DEFAULT_MODEL, engine="triton", url=triton_server.url)
    yield punct
    punct.close()


def test_labels_and_cases_through_triton_equal_the_local_engines(triton_punctuator):
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.text.normalize import normalize_words

    words = normalize_words(TEXT.split())
    local = OfflineDecoder.from_model_dir(DEFAULT_MODEL, engine="onnxruntime", intra_op_threads=1)
    try:
        expected = local.labels_and_cases(words)
        text = local.punctuate_text(TEXT, capitalize=True)
    finally:
        local.close()
    assert triton_punctuator.labels_and_cases(words) == expected
    assert triton_punctuator.punctuate_text(TEXT, capitalize=True) == text


def test_the_engine_describes_the_served_model(triton_punctuator, triton_server):
    engine = triton_punctuator.engine
    assert engine.name == "triton" and engine.has_case and engine.max_batch == 4
    assert engine.rows_independent is False  # the folder's dynamic int8 graph (PyTriton carries no parameters)
    spec = engine.io_spec()
    assert spec.backend == "triton" and spec.artifact == f"{triton_server.url}/streampunct"


def test_a_batch_beyond_max_batch_is_split_into_requests_with_the_same_rows(triton_punctuator):
    from engines.registry import load_engine

    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 5000, (9, 20)).astype(np.int64)
    mask = np.ones_like(ids)
    got = triton_punctuator.engine.infer_heads(ids, mask)
    local = load_engine("onnxruntime", DEFAULT_MODEL, intra_op_threads=1)
    try:  # the int8 graph's rows depend on their batch: compare with the same 4 + 4 + 1 split
        want = [local.infer_heads(ids[i:i + 4], mask[i:i + 4]) for i in range(0, 9, 4)]
    finally:
        local.close()
    np.testing.assert_array_equal(got.punctuation, np.concatenate([w.punctuation for w in want]))
    np.testing.assert_array_equal(got.case, np.concatenate([w.case for w in want]))
    assert triton_punctuator.engine.infer(ids[:2], mask[:2]).shape == (2, 20, 4)


def test_an_unknown_model_name_is_refused(triton_server):
    from engines.registry import load_engine

    with pytest.raises(ArtifactError, match="no-such-model"):
        load_engine("triton", DEFAULT_MODEL, url=triton_server.url, model_name="no-such-model", ready_timeout_s=0.5)


async def test_a_server_with_the_triton_engine_streams_the_local_engines_finals(triton_server):
    """serve --engine triton: the WebSocket tier keeps the session and its windows, Triton runs them."""
    import asyncio

    from streampunct.client.stream_client import StreamClient, Transcript
    from streampunct.server.app import ServerConfig, serve
    from streampunct.text.normalize import normalize_words

    words = normalize_words(TEXT.split())

    async def stream(**config) -> Transcript:
        server = await serve(ServerConfig(model_dir=DEFAULT_MODEL, port=0, **config))
        try:
            await asyncio.wait_for(server.wait_ready(), 60)
            async with await StreamClient.connect(server.url, right_context=4, max_delay_ms=600_000) as client:
                transcript = Transcript()
                for i in range(0, len(words), 3):
                    await client.send_words(words[i:i + 3])
                await client.end()
                async for message in client:
                    transcript.apply(message)
                return transcript
        finally:
            await server.shutdown()

    local = await stream(engine="onnxruntime", stream_cache="off")
    remote = await stream(engine="triton", engine_options={"url": triton_server.url})
    assert remote.words == local.words == words
    assert remote.labels == local.labels
