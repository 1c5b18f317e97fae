"""The JSON sidecar that travels with every artifact (``model.onnx`` -> ``model.onnx.json``).

The sidecar holds artifact facts: what the artifact takes and returns, how it
was made and from what. Labels, label position and window are facts of the
model and live once, in the model folder's ``streampunct.json``. Keys
(``format_version`` 2):

``format_version``, ``artifact``, ``backend``, ``precision``, ``inputs``,
``outputs``, ``source_sha256``, ``artifact_sha256``, ``tool_versions``, ``recipe`` (how the artifact was made:
exporter, quantizer and their settings), and where they apply ``parent`` (the
artifact this one was derived from), ``build``
(TensorRT: GPU, compute capability, TensorRT version, profiles) and
``parity`` (figures measured against the torch model). Version 1 sidecars
also carried ``labels``, ``label_position`` and ``window``; they are read and
those keys ignored. See docs/engines.md.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engines.base import PRECISIONS, ArtifactError, ArtifactMismatch, IOSpec, TensorSpec
from engines.deps import tool_versions

FORMAT_VERSION = 2
BACKENDS_WITH_ARTIFACTS = ("onnxruntime", "tensorrt")
_REQUIRED = ("format_version", "artifact", "backend", "precision", "inputs", "outputs", "source_sha256")


@dataclass(frozen=True)
class Sidecar:
    """Parsed sidecar of one artifact. Attributes mirror the JSON keys (see module doc)."""

    artifact: str
    backend: str
    precision: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    source_sha256: str
    artifact_sha256: str = ""
    tool_versions: Mapping[str, str] = field(default_factory=dict)
    parent: Mapping[str, str] | None = None
    recipe: Mapping[str, Any] | None = None
    build: Mapping[str, Any] | None = None
    parity: Mapping[str, Any] | None = None
    format_version: int = FORMAT_VERSION

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS_WITH_ARTIFACTS:
            raise ArtifactError(
                f"sidecar backend must be one of {BACKENDS_WITH_ARTIFACTS}, got {self.backend!r}"
            )
        if self.precision not in PRECISIONS:
            raise ArtifactError(f"sidecar precision must be one of {PRECISIONS}, got {self.precision!r}")

    def replace(self, **changes: Any) -> Sidecar:
        return dataclasses.replace(self, **changes)

    def quantizes_activations(self) -> bool:
        """Whether the artifact quantizes activations with dynamic, batch-wide scales.

        ``build-engine``'s int8 graphs come from ONNX Runtime's ``quantize_dynamic``
        (the recipe says so): each DynamicQuantizeLinear takes its scale from the min
        and max of its whole input tensor, so a row's logits depend on the other rows
        of its batch and on the padding (an engine's ``rows_independent`` is False).
        A graph given static scales (``training.static_scales``) names its own method.
        """
        return "quantize_dynamic" in str((self.recipe or {}).get("method", ""))

    def prepared_for_tensorrt(self) -> str | None:
        """How a graph ``build-engine --backend tensorrt`` prepared for TensorRT keeps its weights
        (``"fp16"``, ``"Q/DQ int8"``), whose weights are not rebuilt in torch; None for another graph."""
        if self.precision == "fp16":
            return "fp16"
        if self.precision == "int8" and "Q/DQ" in str((self.recipe or {}).get("method", "")):
            return "Q/DQ int8"
        return None

    def io_spec(self, **limits: int | None) -> IOSpec:
        """The IOSpec an engine loaded from this artifact reports."""
        return IOSpec(
            backend=self.backend,
            artifact=self.artifact,
            precision=self.precision,
            inputs=self.inputs,
            outputs=self.outputs,
            **limits,
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format_version": self.format_version,
            "artifact": self.artifact,
            "backend": self.backend,
            "precision": self.precision,
            "inputs": [t.to_dict() for t in self.inputs],
            "outputs": [t.to_dict() for t in self.outputs],
            "source_sha256": self.source_sha256,
            "artifact_sha256": self.artifact_sha256,
            "tool_versions": dict(self.tool_versions),
        }
        for key in ("parent", "recipe", "build", "parity"):
            value = getattr(self, key)
            if value is not None:
                d[key] = _plain(value)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, where: str = "sidecar") -> Sidecar:
        missing = [k for k in _REQUIRED if k not in d]
        if missing:
            raise ArtifactError(f"{where} lacks required keys: {', '.join(missing)}")
        version = d["format_version"]
        if isinstance(version, bool) or not isinstance(version, int):
            raise ArtifactError(f"{where} has format_version {version!r}: it must be an integer")
        for key in ("inputs", "outputs"):
            if not isinstance(d[key], list) or not all(isinstance(t, Mapping) for t in d[key]):
                raise ArtifactError(f"{where} is malformed: {key} must be a list of objects "
                                    "(name, dtype, shape), not " + repr(d[key])[:80])
        if version > FORMAT_VERSION or version < 1:
            raise ArtifactError(
                f"{where} has format_version {version!r}; this streampunct reads up to "
                f"{FORMAT_VERSION}: upgrade streampunct or rebuild the artifact"
            )
        try:
            return cls(
                artifact=str(d["artifact"]),
                backend=str(d["backend"]),
                precision=str(d["precision"]),
                inputs=tuple(TensorSpec.from_dict(t) for t in d["inputs"]),
                outputs=tuple(TensorSpec.from_dict(t) for t in d["outputs"]),
                source_sha256=str(d["source_sha256"]),
                artifact_sha256=str(d.get("artifact_sha256", "")),
                tool_versions=dict(d.get("tool_versions", {})),
                parent=d.get("parent"),
                recipe=d.get("recipe"),
                build=d.get("build"),
                parity=d.get("parity"),
                format_version=version,
            )
        except ArtifactError as e:
            raise ArtifactError(f"{where}: {e}") from None
        except (KeyError, TypeError, ValueError) as e:
            raise ArtifactError(f"{where} is malformed: {e!r}") from e


def _plain(value: Any) -> Any:
    """Mappings/tuples -> JSON-ready dicts/lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def sidecar_path(artifact_path: str | Path) -> Path:
    """``model.onnx`` -> ``model.onnx.json``."""
    artifact_path = Path(artifact_path)
    return artifact_path.with_name(artifact_path.name + ".json")


def sha256_file(path: str | Path, *, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_files(paths: list[Path], root: Path) -> str:
    """One hash over several files (their paths relative to ``root`` and contents)."""
    h = hashlib.sha256()
    for path in sorted(paths):
        h.update(str(path.relative_to(root)).encode())
        h.update(b"\0")
        h.update(sha256_file(path).encode())
    return h.hexdigest()


def write_sidecar(sidecar: Sidecar, artifact_path: str | Path) -> Path:
    """Write ``<artifact>.json`` next to the artifact; returns its path."""
    path = sidecar_path(artifact_path)
    if Path(artifact_path).name != sidecar.artifact:
        raise ArtifactError(
            f"sidecar names artifact {sidecar.artifact!r} but is written next to {Path(artifact_path).name!r}"
        )
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(sidecar.to_dict(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def read_sidecar(artifact_path: str | Path) -> Sidecar:
    """Read and validate the sidecar of ``artifact_path``."""
    path = sidecar_path(artifact_path)
    if not path.is_file():
        raise ArtifactError(
            f"no sidecar {path.name} next to {Path(artifact_path).name} in {path.parent}; "
            "every artifact needs one: rebuild it with 'streampunct build-engine'"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArtifactError(f"cannot read sidecar {path}: {e}") from e
    if not isinstance(data, dict):
        raise ArtifactError(f"sidecar {path} must hold a JSON object")
    sidecar = Sidecar.from_dict(data, where=f"sidecar {path}")
    if sidecar.artifact != Path(artifact_path).name:
        raise ArtifactMismatch(
            f"sidecar {path} describes {sidecar.artifact!r}, not {Path(artifact_path).name!r}"
        )
    return sidecar


def verify_artifact(artifact_path: str | Path, sidecar: Sidecar) -> None:
    """Raise ArtifactMismatch if the file's sha256 differs from the sidecar's."""
    if not sidecar.artifact_sha256:
        return
    actual = sha256_file(artifact_path)
    if actual != sidecar.artifact_sha256:
        raise ArtifactMismatch(
            f"{artifact_path} does not match its sidecar (sha256 {actual[:12]}... vs "
            f"{sidecar.artifact_sha256[:12]}...): the file was replaced or corrupted; "
            "rebuild it or restore the matching sidecar"
        )


def new_sidecar(
    artifact_path: str | Path,
    *,
    backend: str,
    precision: str,
    inputs: tuple[TensorSpec, ...],
    outputs: tuple[TensorSpec, ...],
    source_sha256: str,
    parent: Sidecar | None = None,
    recipe: Mapping[str, Any] | None = None,
    build: Mapping[str, Any] | None = None,
) -> Sidecar:
    """A sidecar for a freshly written artifact (hashes it, records tool versions).

    ``source_sha256`` names what the artifact was made from (the checkpoint,
    or for a derived artifact its parent's source)."""
    artifact_path = Path(artifact_path)
    return Sidecar(
        artifact=artifact_path.name,
        backend=backend,
        precision=precision,
        inputs=inputs,
        outputs=outputs,
        source_sha256=source_sha256,
        artifact_sha256=sha256_file(artifact_path),
        tool_versions=tool_versions(),
        parent=(
            {"artifact": parent.artifact, "sha256": parent.artifact_sha256}
            if parent is not None
            else None
        ),
        recipe=recipe,
        build=build,
    )
