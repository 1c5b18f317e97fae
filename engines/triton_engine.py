"""The ``triton`` engine backend: windows run on a Triton Inference Server over gRPC.

The WebSocket tier (``streampunct serve --engine triton``) keeps the sessions, their
windows and the protocol; each engine call is one Triton request of the batch it was
given (int64 ``input_ids``/``attention_mask`` [B, T]). Triton's dynamic batcher merges
requests of the same shape from every front end into one model run, so several front ends
share one pool of CPUs or GPUs::

    streampunct build-engine --model models/default --triton-repo /srv/triton   # the repository
    tritonserver --model-repository /srv/triton                                  # the inference tier
    streampunct serve --engine triton --engine-option url=triton-host:8001        # each front end

The model folder (``--model``) still gives the front end its tokenizer, labels and windows;
the Triton model must have been built from the same checkpoint: when its config carries
``streampunct_source_sha256`` (``engines.build.triton_repo`` writes it), a different checkpoint is
refused at load. ``rows_independent`` comes from the config's ``streampunct_rows_independent``,
else from the folder's graph's sidecar.

Whole windows only: the backend declares no streaming capability (it is not a
:class:`engines.base.StreamEngine`), so the server runs whole windows with it (no cached left
context). docs/engines.md says how cached left context could be kept on Triton.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import (
    CASE_OUTPUT_NAME,
    INPUT_NAMES,
    OUTPUT_NAME,
    ArtifactError,
    ArtifactMismatch,
    EngineBase,
    EngineError,
    HeadLogits,
    InferenceError,
    IOSpec,
    LoadCancelled,
    TensorSpec,
    check_batch,
    load_cancel,
    make_options,
)
from engines.deps import require

logger = logging.getLogger(__name__)

#: Triton's name of the default model (``build-engine --triton-repo``'s ``--triton-name``).
DEFAULT_MODEL_NAME = "streampunct"


@dataclass(frozen=True)
class TritonOptions:
    """Settings of the triton backend (``--engine-option KEY=VALUE``).

    Attributes:
        url: Triton's gRPC endpoint, ``host:port``.
        model_name: the model on the server (``streampunct``; ``streampunct_trt`` for the plan).
        model_version: the version to run ("" : the server's policy, the latest).
        timeout_s: longest one request may take before it fails (the batch then fails
            with InferenceError, as a local engine's error would).
        ready_timeout_s: how long the engine waits at load for the server and the model to
            be ready.
        verify: refuse a Triton model built from another checkpoint than the model folder's
            (when its config names one).
        pad_multiple: pad each request's sequence length up to a multiple of this (1: none),
            so that windows of nearly equal lengths from several front ends share a shape and
            Triton can batch them; padding is masked out (it changes no label where rows are
            independent).
    """

    url: str = "127.0.0.1:8001"
    model_name: str = DEFAULT_MODEL_NAME
    model_version: str = ""
    timeout_s: float = 30.0
    ready_timeout_s: float = 60.0
    verify: bool = True
    pad_multiple: int = 1

    def __post_init__(self) -> None:
        if not self.url or "/" in self.url:
            raise EngineError(f"url must be Triton's gRPC host:port (no scheme), not {self.url!r}")
        if self.timeout_s <= 0 or self.ready_timeout_s < 0:
            raise EngineError("timeout_s must be > 0 and ready_timeout_s >= 0")
        if self.pad_multiple < 1:
            raise EngineError(f"pad_multiple must be >= 1, got {self.pad_multiple}")


def _parameter(config: Mapping[str, Any], key: str) -> str | None:
    """A ``parameters`` string value of a model config (as JSON), or None."""
    value = (config.get("parameters") or {}).get(key)
    return None if not isinstance(value, Mapping) else value.get("string_value")


def local_source_sha256(model_dir: Path | None) -> set[str]:
    """The checkpoints the folder's graphs were built from (their sidecars' ``source_sha256``)."""
    if model_dir is None or not model_dir.is_dir():
        return set()
    from engines.sidecar import read_sidecar

    found = set()
    for path in sorted(model_dir.glob("*.onnx")) + sorted(model_dir.glob("*.plan")):
        try:
            sha = read_sidecar(path).source_sha256
        except ArtifactError:
            continue
        if sha:
            found.add(sha)
    return found


def _local_rows_independent(model_dir: Path | None) -> bool:
    """Whether the folder's whole-window graph (as onnxruntime would choose it) keeps rows
    independent; True when the folder has none."""
    if model_dir is None:
        return True
    from engines.registry import resolve_artifact
    from engines.sidecar import read_sidecar

    try:
        return not read_sidecar(resolve_artifact("onnxruntime", model_dir)).quantizes_activations()
    except ArtifactError:
        return True


class TritonEngine(EngineBase):
    """A model on a Triton server, behind the Engine protocol.

    Attributes:
        name: ``"triton"``.
        options: the settings used.
        has_case: the Triton model returns ``case_logits``.
        rows_independent: from the model's config, else the folder's graph.
        max_batch: the model's ``max_batch_size`` (larger batches are split into several requests).
        min_len: shortest sequence the model accepts (a TensorRT plan's profile); shorter
            requests are padded up to it.
    """

    name = "triton"

    def __init__(self, options: TritonOptions | None = None, *, model_dir: str | Path | None = None) -> None:
        self._grpc = require("tritonclient.grpc", feature="the triton engine backend")
        self.options = options or TritonOptions()
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self._client = self._grpc.InferenceServerClient(url=self.options.url)
        try:
            self._connect()
        except BaseException:
            self.close()
            raise

    def _connect(self) -> None:
        """Wait for the model, read its metadata and config, check them (``__init__``)."""
        self._wait_ready()
        o = self.options
        try:
            metadata = self._client.get_model_metadata(o.model_name, o.model_version, as_json=True)
            config = self._client.get_model_config(o.model_name, o.model_version, as_json=True)["config"]
        except self._exception as e:
            raise ArtifactError(f"Triton at {o.url}: cannot read model {o.model_name!r}: {e.message()}") from e
        inputs = {t["name"]: t["datatype"] for t in metadata.get("inputs", [])}
        outputs = [t["name"] for t in metadata.get("outputs", [])]
        if inputs != {name: "INT64" for name in INPUT_NAMES} or OUTPUT_NAME not in outputs:
            raise ArtifactMismatch(
                f"Triton model {o.model_name!r} at {o.url} takes {inputs} and returns {outputs}; a streampunct "
                f"model takes {list(INPUT_NAMES)} (INT64) and returns {OUTPUT_NAME!r} "
                "(streampunct build-engine --triton-repo writes one)")
        self.has_case = CASE_OUTPUT_NAME in outputs
        self.max_batch = int(config.get("max_batch_size", 0) or 0) or None
        min_len = _parameter(config, "streampunct_min_len")
        self.min_len = int(min_len) if min_len else None
        rows = _parameter(config, "streampunct_rows_independent")
        self.rows_independent = rows == "true" if rows in ("true", "false") else _local_rows_independent(self.model_dir)
        self.precision = _parameter(config, "streampunct_precision") or "unknown"
        self.source_sha256 = _parameter(config, "streampunct_source_sha256")
        if o.verify and self.source_sha256:
            local = local_source_sha256(self.model_dir)
            if local and self.source_sha256 not in local:
                raise ArtifactMismatch(
                    f"Triton model {o.model_name!r} at {o.url} was built from checkpoint {self.source_sha256[:12]}, "
                    f"the model folder {self.model_dir} from {', '.join(s[:12] for s in sorted(local))}: the front "
                    "end's tokenizer and labels must be the model's (engine option verify=false skips this check)")
        self._outputs = [OUTPUT_NAME, CASE_OUTPUT_NAME] if self.has_case else [OUTPUT_NAME]
        logger.info("Triton model %s at %s (%s, max batch %s, rows independent %s)", o.model_name, o.url,
                    self.precision, self.max_batch, self.rows_independent)

    @property
    def _exception(self) -> type[Exception]:
        return require("tritonclient.utils", feature="the triton engine backend").InferenceServerException

    def _wait_ready(self) -> None:
        """Poll until the server and the model are ready, at most ``ready_timeout_s``."""
        o = self.options
        deadline = time.monotonic() + o.ready_timeout_s
        cancel = load_cancel()
        last: str = "no answer"
        said = False
        while True:
            bound = max(0.5, min(5.0, deadline - time.monotonic()))  # no call outlives the wait by much
            try:
                if (self._client.is_server_ready(client_timeout=bound)
                        and self._client.is_model_ready(o.model_name, o.model_version, client_timeout=bound)):
                    return
                last = f"the server has no ready model {o.model_name!r}"
            except self._exception as e:
                last = e.message() or str(e)
            if time.monotonic() >= deadline:
                raise ArtifactError(f"Triton at {o.url} is not ready after {o.ready_timeout_s:.0f} s: {last}")
            if not said:  # the wait is not silent: a start that seems to hang says what it waits for
                logger.warning("Triton at %s is not ready (%s): waiting up to %.0f s (engine option ready_timeout_s)",
                               o.url, last, o.ready_timeout_s)
                said = True
            if cancel.wait(0.2):  # the server shuts down: it need not wait for the rest
                raise LoadCancelled(f"Triton at {o.url}: gave up waiting for it to be ready (shutting down)")

    def _run(self, ids: np.ndarray, mask: np.ndarray, outputs: list[str]) -> list[np.ndarray]:
        """One request (padded to ``min_len`` / ``pad_multiple``; outputs unpadded)."""
        if self._client is None:
            raise InferenceError(f"the triton engine for {self.options.model_name} is closed")
        grpc, o = self._grpc, self.options
        batch, seq = ids.shape
        target = max(seq, self.min_len or 0)
        target = -(-target // o.pad_multiple) * o.pad_multiple
        if target != seq:
            ids = np.pad(ids, ((0, 0), (0, target - seq)))
            mask = np.pad(mask, ((0, 0), (0, target - seq)))
        inputs = []
        for name, array in zip(INPUT_NAMES, (ids, mask), strict=True):
            tensor = grpc.InferInput(name, list(array.shape), "INT64")
            tensor.set_data_from_numpy(array)
            inputs.append(tensor)
        try:
            result = self._client.infer(o.model_name, inputs, model_version=o.model_version,
                                        outputs=[grpc.InferRequestedOutput(n) for n in outputs],
                                        client_timeout=o.timeout_s)
        except self._exception as e:
            raise InferenceError(f"Triton at {o.url} failed on a batch of shape {ids.shape}: "
                                 f"{e.message() or e}") from e
        out = []
        for n in outputs:
            array = result.as_numpy(n)
            if array is None or array.shape[:2] != (batch, target):
                raise InferenceError(f"Triton returned {n} of shape {None if array is None else array.shape} "
                                     f"for a batch of shape {ids.shape}")
            out.append(np.asarray(array[:, :seq], dtype=np.float32))
        return out

    def _heads(self, input_ids: np.ndarray, attention_mask: np.ndarray, outputs: list[str]) -> list[np.ndarray]:
        ids, mask = check_batch(input_ids, attention_mask)
        step = self.max_batch or len(ids)
        parts = [self._run(ids[i:i + step], mask[i:i + step], outputs) for i in range(0, len(ids), step)]
        return [np.concatenate([p[k] for p in parts]) if len(parts) > 1 else parts[0][k]
                for k in range(len(outputs))]

    def infer(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """int64[B,T], int64[B,T] -> float32[B,T,C] (requests the punctuation logits only)."""
        return self._heads(input_ids, attention_mask, [OUTPUT_NAME])[0]

    def infer_heads(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> HeadLogits:
        out = self._heads(input_ids, attention_mask, self._outputs)
        return HeadLogits(out[0], out[1] if self.has_case else None)

    def io_spec(self) -> IOSpec:
        outputs = [TensorSpec(OUTPUT_NAME, "float32", ("batch", "sequence", "labels"))]
        if self.has_case:
            outputs.append(TensorSpec(CASE_OUTPUT_NAME, "float32", ("batch", "sequence", 4)))
        return IOSpec(
            backend="triton", artifact=f"{self.options.url}/{self.options.model_name}", precision=self.precision,
            inputs=tuple(TensorSpec(n, "int64", ("batch", "sequence")) for n in INPUT_NAMES),
            outputs=tuple(outputs), max_batch=None, max_len=None, min_len=self.min_len,
        )

    def close(self) -> None:
        """Close the gRPC channel (idempotent)."""
        client, self._client = self._client, None
        if client is not None:
            client.close()


def open_engine(model_dir: Path, artifact: Path | None, options: Mapping[str, Any]) -> TritonEngine:
    """Registry entry point: ``load_engine("triton", model_dir, url="host:8001")``."""
    return TritonEngine(make_options(TritonOptions, options, "triton"), model_dir=model_dir)
