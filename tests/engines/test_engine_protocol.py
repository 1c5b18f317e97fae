"""The Engine protocol as written down (engines.base): every engine declares its
capabilities, a streaming graph's engine is a StreamEngine built with its cache size,
and engines/ has no import circles (in-function imports included)."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engines.base import Engine, EngineBase, EngineError, HeadLogits, StreamEngine, StreamEngineBase

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "models" / "default"


def test_every_engine_class_declares_the_capabilities():
    from engines.build.torch_engine import TorchEngine
    from engines.fake import FakeEngine
    from engines.ort_engine import OrtEngine, OrtStreamEngine
    from engines.tensorrt_engine import TensorRTEngine
    from engines.torch_backend import TorchGraphEngine

    for cls in (OrtEngine, OrtStreamEngine, FakeEngine, TensorRTEngine, TorchEngine, TorchGraphEngine):
        assert issubclass(cls, EngineBase), cls
        for name in ("name", "has_case", "rows_independent", "infer", "infer_heads", "io_spec", "close"):
            assert hasattr(cls, name), (cls, name)
    for cls in (OrtStreamEngine, TorchGraphEngine):  # the streaming graph's engines
        assert issubclass(cls, StreamEngineBase), cls
        assert "stream_shape" in StreamEngineBase.__annotations__ and cls.cache_tokens is None  # until built
        assert hasattr(cls, "infer_stream")


def test_engine_base_gives_the_defaults():
    class Minimal(EngineBase):
        name = "minimal"

        def infer(self, input_ids, attention_mask):
            return np.zeros((*input_ids.shape, 4), np.float32)

    engine = Minimal()
    ids = np.ones((1, 3), np.int64)
    heads = engine.infer_heads(ids, ids)
    assert isinstance(heads, HeadLogits) and heads.case is None and heads.punctuation.shape == (1, 3, 4)
    logits, case = heads  # still a tuple
    assert case is None and not engine.has_case and engine.rows_independent
    assert not isinstance(engine, StreamEngine)


@pytest.fixture(scope="module")
def shipped() -> Path:
    pytest.importorskip("onnxruntime")
    if not (DEFAULT / "streampunct.json").is_file():
        pytest.skip("no shipped model")
    return DEFAULT


def test_the_shipped_engines_satisfy_the_protocols(shipped):
    from engines.model_meta import read_model_meta
    from engines.registry import load_engine, load_stream_engine

    whole = load_engine("onnxruntime", shipped, intra_op_threads=1)
    stream = load_stream_engine("onnxruntime", shipped, intra_op_threads=1)
    try:
        assert isinstance(whole, Engine) and not isinstance(whole, StreamEngine)
        assert isinstance(stream, StreamEngine)
        assert whole.has_case and not whole.rows_independent  # case head; int8 dynamic quantization
        assert stream.cache_tokens == read_model_meta(shipped).stream_cache_tokens == 60
        ids = np.asarray([[101, 7592, 2129, 102]], dtype=np.int64)
        heads = whole.infer_heads(ids, np.ones_like(ids))
        assert isinstance(heads, HeadLogits) and heads.case.shape == (1, 4, 4)
    finally:
        whole.close()
        stream.close()


def test_the_cache_size_is_given_when_the_engine_is_built(shipped, tmp_path):
    from engines.ort_engine import OrtStreamEngine, open_stream_engine

    folder = tmp_path / "m"
    folder.mkdir()
    meta = json.loads((shipped / "streampunct.json").read_text())
    for name in (meta["stream_artifact"], meta["stream_artifact"] + ".json"):
        shutil.copy(shipped / name, folder / name)
    (folder / "streampunct.json").write_text(json.dumps({"stream_artifact": meta["stream_artifact"]}))
    engine = open_stream_engine(folder, {"intra_op_threads": 1, "verify_checksum": False})
    assert engine.cache_tokens is None  # the folder names none: the streaming window's left context
    engine.close()
    with pytest.raises(EngineError, match="cache_tokens must be >= 1"):
        OrtStreamEngine(folder / meta["stream_artifact"], cache_tokens=0)


def _import_graph(packages: tuple[str, ...], root: Path = REPO) -> dict[str, set[str]]:
    """Module -> our modules it imports, from every import statement (in functions too)."""
    paths = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            paths[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def ours(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        found: set[str] = set()
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            found.update(m for m in map(ours, names) if m and m != module)
        graph[module] = found
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_cycle_check_sees_a_lazy_circle(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from pkg.b import g\n    return g\n")
    (tmp_path / "pkg" / "b.py").write_text("from . import c\n")
    (tmp_path / "pkg" / "c.py").write_text("import os\n\ndef h():\n    import pkg.a\n")
    (tmp_path / "pkg" / "d.py").write_text("from pkg import a\n")
    assert _cycles(_import_graph(("pkg",), tmp_path)) == [["pkg.a", "pkg.b", "pkg.c"]]
    (tmp_path / "pkg" / "c.py").write_text("import os\n")
    assert _cycles(_import_graph(("pkg",), tmp_path)) == []


@pytest.mark.parametrize("packages", [("engines",), ("streampunct", "engines")])
def test_no_import_circles(packages):
    assert _cycles(_import_graph(packages)) == []


def test_the_runtime_reaches_engines_through_the_registry():
    """streampunct imports from engines only the registry (backends, the stream mode), the
    protocol's types (engines.base) and the model folder's schema (engines.model_meta)."""
    graph = _import_graph(("streampunct", "engines"))
    reached = {m for module, found in graph.items() if module.split(".")[0] == "streampunct"
               for m in found if m.split(".")[0] == "engines"}
    assert reached <= {"engines.registry", "engines.base", "engines.model_meta"}, reached
    assert "engines.registry" in reached
