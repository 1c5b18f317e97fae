"""Static activation scales for a dynamic int8 ONNX Runtime graph: rows that batch exactly.

A ``quantize_dynamic`` graph (:mod:`engines.build.quantize`) quantizes each
product's input with a scale from the min and max of the *whole* input
tensor, every row of the engine call and its padding. A window's logits then
depend on the windows that shared its call, so the server runs such windows
one call each under ``--batch-rows exact`` (docs/server.md, "Batch rows"),
and each call pays the graph's fixed cost alone (about 2 ms of a 2.5 ms
one-token cached call on one core).

This module replaces each ``DynamicQuantizeLinear`` with a ``QuantizeLinear``
whose scale and zero point are constants, taken from the ranges its input
showed on calibration text (:class:`ActivationRanges`), and writes each
``MatMulInteger -> Cast -> Mul(scales) [-> Add(bias)]`` chain as one
``MatMulIntegerToFloat`` (ONNX Runtime fuses the chain only when the scales'
product is computed in the graph, which constant scales fold away). The
weights, the weight scales and every other node stay as they are. A row's
logits then depend on that row only: a padded call gives each window its
own-call logits (bitwise at equal lengths; cached windows of different
cached lengths, padded together, can move a float sum by an ulp, which a
quantization step can round the other way), so the engine reports
``rows_independent`` and the server pads such calls.

The graph's sidecar records the calibration (data, words, percentile) and
every tensor's range (``recipe.method`` is :data:`METHOD`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import GraphPrepError
from engines.build.onnx_graph import count_ops, load_model
from engines.deps import require
from engines.sidecar import Sidecar, new_sidecar, read_sidecar, sidecar_path, write_sidecar

logger = logging.getLogger(__name__)

#: ``recipe.method`` of a graph with static activation scales.
METHOD = "streampunct static activation scales"
#: The default percentile of each tensor's calibration values kept as its range: 99.999
#: lost least on validation of the shipped default (99.99 clipped too much; docs/engines.md).
DEFAULT_PERCENTILE = 99.999


def dynamic_inputs(model) -> list[str]:
    """The names of the tensors a graph quantizes dynamically (``DynamicQuantizeLinear`` inputs)."""
    return [n.input[0] for n in model.graph.node if n.op_type == "DynamicQuantizeLinear"]


def observation_graph(int8_path: str | Path, out_path: str | Path) -> list[str]:
    """Write a copy of the dynamic int8 graph ``int8_path`` that also outputs every tensor it
    quantizes dynamically, with ``int8_path``'s sidecar (same interface); returns their names.

    An engine loaded on the copy answers as the original (the extra outputs are only fetched on
    request), so the copy serves the calibration run and records its inputs at once.
    """
    onnx = require("onnx", feature="static activation scales")
    int8_path, out_path = Path(int8_path), Path(out_path)
    parent = _dynamic_sidecar(int8_path)
    model = load_model(int8_path)
    names = dynamic_inputs(model)
    if not names:
        raise GraphPrepError(f"{int8_path} quantizes no activation dynamically (no DynamicQuantizeLinear): "
                             "it is not a dynamic int8 graph, or its scales are already static")
    outputs = {o.name for o in model.graph.output}
    for name in names:
        if name not in outputs:
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    onnx.save(model, str(out_path))
    write_sidecar(new_sidecar(out_path, backend="onnxruntime", precision="int8", inputs=parent.inputs,
                              outputs=parent.outputs, source_sha256=parent.source_sha256, parent=parent,
                              recipe={"method": "calibration copy of " + str((parent.recipe or {}).get("method"))}),
                  out_path)
    return names


@dataclass
class ActivationRanges:
    """The values each dynamically quantized tensor took on calibration calls.

    Keeps each tensor's min and max, and up to ``samples_per_call`` values of each call drawn
    at random (seeded) for the percentiles: each call weighs about the same, whatever its
    length. Only real tokens' values are offered (padding rows
    are the caller's to drop).
    """

    names: tuple[str, ...]
    samples_per_call: int = 256
    seed: int = 0
    calls: int = 0
    _min: dict[str, float] = field(default_factory=dict)
    _max: dict[str, float] = field(default_factory=dict)
    _samples: dict[str, list[np.ndarray]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)

    def observe(self, values: Iterable[np.ndarray]) -> None:
        """One call's tensors, in the order of ``names``."""
        values = list(values)
        if len(values) != len(self.names):
            raise ValueError(f"{len(values)} tensors for {len(self.names)} names")
        for name, v in zip(self.names, values, strict=True):
            flat = np.asarray(v, dtype=np.float32).reshape(-1)
            if not flat.size:
                continue
            if not np.isfinite(flat).all():
                raise GraphPrepError(f"calibration: {name} took a non-finite value")
            self._min[name] = min(self._min.get(name, np.inf), float(flat.min()))
            self._max[name] = max(self._max.get(name, -np.inf), float(flat.max()))
            picked = flat if flat.size <= self.samples_per_call else \
                flat[self._rng.integers(0, flat.size, self.samples_per_call)]
            self._samples.setdefault(name, []).append(picked)
        self.calls += 1

    def ranges(self, percentile: float = DEFAULT_PERCENTILE) -> dict[str, tuple[float, float]]:
        """Each tensor's (low, high): its ``100 - percentile`` and ``percentile`` percentiles
        (100: its min and max), widened to include 0 as ``DynamicQuantizeLinear``'s are."""
        if not 50.0 < percentile <= 100.0:
            raise ValueError(f"percentile must be in (50, 100], got {percentile}")
        missing = [n for n in self.names if n not in self._samples]
        if missing:
            raise GraphPrepError(f"calibration saw no values of {missing[:3]} ({len(missing)} tensors): "
                                 "give it more text")
        out = {}
        for name in self.names:
            if percentile == 100.0:
                lo, hi = self._min[name], self._max[name]
            else:
                values = np.concatenate(self._samples[name])
                lo, hi = (float(x) for x in np.quantile(values, [(100.0 - percentile) / 100.0, percentile / 100.0]))
                lo, hi = max(lo, self._min[name]), min(hi, self._max[name])
            out[name] = (min(lo, 0.0), max(hi, 0.0))
        return out


def uint8_scale(low: float, high: float) -> tuple[np.float32, np.uint8]:
    """The scale and zero point ``DynamicQuantizeLinear`` would take for a tensor spanning
    [low, high] (asymmetric uint8; the range must include 0)."""
    if not low <= 0.0 <= high:
        raise ValueError(f"the range must include 0, got [{low}, {high}]")
    if high == low:
        return np.float32(1.0), np.uint8(0)
    scale = np.float32((high - low) / 255.0)
    return scale, np.uint8(np.clip(np.rint(-low / scale), 0, 255))


def static_scale_graph(int8_path: str | Path, out_path: str | Path, ranges: Mapping[str, tuple[float, float]],
                       calibration: Mapping[str, Any]) -> Sidecar:
    """Write ``out_path``: the dynamic int8 graph ``int8_path`` with the constant activation scales
    of ``ranges`` (tensor -> (low, high), one per ``DynamicQuantizeLinear`` input) and fused
    products; its sidecar's recipe records ``calibration`` and the ranges."""
    onnx = require("onnx", feature="static activation scales")
    numpy_helper = require("onnx.numpy_helper", feature="static activation scales")
    int8_path, out_path = Path(int8_path), Path(out_path)
    parent = _dynamic_sidecar(int8_path)
    model = load_model(int8_path)
    names = dynamic_inputs(model)
    missing = sorted(set(names) - set(ranges))
    if not names or missing:
        raise GraphPrepError(f"{int8_path}: no range for {missing[:3]}" if names else
                             f"{int8_path} quantizes no activation dynamically (no DynamicQuantizeLinear)")
    nodes = []
    for node in model.graph.node:
        if node.op_type != "DynamicQuantizeLinear":
            nodes.append(node)
            continue
        scale, zero_point = uint8_scale(*ranges[node.input[0]])
        quantized, scale_name, zp_name = node.output
        model.graph.initializer.extend([numpy_helper.from_array(np.array(scale, np.float32), scale_name),
                                        numpy_helper.from_array(np.array(zero_point, np.uint8), zp_name)])
        nodes.append(onnx.helper.make_node("QuantizeLinear", [node.input[0], scale_name, zp_name], [quantized],
                                           name=(node.name or quantized) + "_static"))
    shapes = {i.name: tuple(i.dims) for i in model.graph.initializer}
    fused = _fuse_products(nodes, shapes, int8_path)
    del model.graph.node[:]
    model.graph.node.extend(fused)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    onnx.checker.check_model(model)
    tmp = out_path.with_name(out_path.name + ".tmp")
    onnx.save(model, str(tmp))
    ops = count_ops(model)
    recipe = {**(parent.recipe or {}), "method": METHOD, "dynamic_method": (parent.recipe or {}).get("method"),
              "calibration": dict(calibration),
              "ranges": {name: [float(lo), float(hi)] for name, (lo, hi) in ranges.items()},
              "static_quantize_nodes": len(names), "int8_matmuls": ops.get("MatMulIntegerToFloat", 0)}
    tmp.replace(out_path)
    sidecar = new_sidecar(out_path, backend="onnxruntime", precision="int8", inputs=parent.inputs,
                          outputs=parent.outputs, source_sha256=parent.source_sha256, parent=parent, recipe=recipe)
    write_sidecar(sidecar, out_path)
    logger.info("wrote %s (%d static activation scales, %d fused int8 products)", out_path, len(names),
                recipe["int8_matmuls"])
    return sidecar


#: The hidden folder a replacement graph is written in, beside the graph (:func:`replacing`).
_REPLACING_PREFIX = ".static-scales-"


@contextlib.contextmanager
def replacing(graph: Path) -> Iterator[Path]:
    """A path for ``graph``'s replacement and its sidecar, in a hidden folder beside ``graph`` (one
    file system): when the block ends without an error the two replace ``graph`` and its sidecar
    by renames; otherwise ``graph`` stays as it was. Other files may be written beside the path.
    Hidden folders that a run killed outright left there (SIGKILL runs no cleanup) are removed
    first."""
    for left in graph.parent.glob(f"{_REPLACING_PREFIX}*"):
        if left.is_dir():
            logger.warning("removing %s, left by a run that was killed", left)
            shutil.rmtree(left, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix=_REPLACING_PREFIX, dir=graph.parent) as tmp:
        out = Path(tmp) / graph.name
        yield out
        os.replace(out, graph)
        os.replace(sidecar_path(out), sidecar_path(graph))


def has_static_scales(sidecar: Sidecar) -> bool:
    """Whether an artifact's activation scales are this module's constants."""
    return (sidecar.recipe or {}).get("method") == METHOD


def _dynamic_sidecar(int8_path: Path) -> Sidecar:
    parent = read_sidecar(int8_path)
    if parent.precision != "int8" or parent.backend != "onnxruntime":
        raise GraphPrepError(f"{int8_path} is a {parent.backend} {parent.precision} graph; static activation "
                             "scales are for ONNX Runtime's dynamic int8 graphs")
    if has_static_scales(parent):
        raise GraphPrepError(f"{int8_path} already has static activation scales; start from the dynamic "
                             "int8 graph (streampunct build-engine)")
    return parent


def _fuse_products(nodes: list, shapes: dict[str, tuple[int, ...]], path: Path) -> list:
    """``MatMulInteger -> Cast -> Mul(a_scale * b_scale) [-> Add(constant bias)]`` as one
    ``MatMulIntegerToFloat`` (com.microsoft), the chains ``quantize_dynamic`` writes;
    ``shapes``: the initializers' shapes (a bias is fused only when it is one value per
    output column, as the op requires)."""
    onnx = require("onnx", feature="static activation scales")
    producer, consumers = {}, {}
    for node in nodes:
        for o in node.output:
            producer[o] = node
        for i in node.input:
            consumers.setdefault(i, []).append(node)
    dropped: set[int] = set()
    replaced: dict[int, Any] = {}
    for node in nodes:
        if node.op_type != "MatMulInteger":
            continue
        try:
            (cast,) = consumers[node.output[0]]
            (mul,) = consumers[cast.output[0]]
            (scales_name,) = [i for i in mul.input if i != cast.output[0]]
            scales = producer[scales_name]
            a_scale, b_scale = scales.input
        except (KeyError, ValueError) as e:
            raise GraphPrepError(f"{path}: {node.name} is not the MatMulInteger -> Cast -> Mul(scales) chain "
                                 "quantize_dynamic writes") from e
        if cast.op_type != "Cast" or mul.op_type != "Mul" or scales.op_type != "Mul":
            raise GraphPrepError(f"{path}: {node.name} is followed by {cast.op_type} -> {mul.op_type}, "
                                 "not Cast -> Mul(scales)")
        a_quantized, b, a_zero_point, b_zero_point = node.input
        bias, output = [], mul.output[0]
        after = consumers.get(mul.output[0], [])
        constants = [i for i in after[0].input if i in shapes] if len(after) == 1 else []
        columns = shapes.get(b, (0,))[-1]
        if after and after[0].op_type == "Add" and len(constants) == 1 and shapes[constants[0]] == (columns,):
            bias = constants
            output = after[0].output[0]
            dropped.add(id(after[0]))
        dropped.update((id(node), id(cast), id(mul)))
        if all(id(c) in dropped for c in consumers[scales.output[0]]):
            dropped.add(id(scales))
        replaced[id(node)] = onnx.helper.make_node(
            "MatMulIntegerToFloat", [a_quantized, b, a_scale, b_scale, a_zero_point, b_zero_point, *bias],
            [output], name=(node.name or output) + "_to_float", domain="com.microsoft")
    return [replaced.get(id(n), n) for n in nodes if id(n) in replaced or id(n) not in dropped]
