"""A model folder's metadata, ``streampunct.json``: one typed schema, its reader and its writer.

Every package reads and writes the file through this module (``engines`` is the
floor that ``streampunct``, ``training`` and ``benchmarks`` may all import).
A runtime model folder (``models/default``) and a training checkpoint folder
hold the same file; the keys the code acts on are typed fields of
:class:`ModelMeta`, everything else (the training record: ``head``,
``head_config``, ``encoder``, ``training_config``, ``data_hashes``,
``validation``, the tuning grids, ...) is kept as read in :attr:`ModelMeta.record`
and written back unchanged.

Keys (all optional in the file; a field is None where its key is absent, and
readers apply the defaults named here):

``name``
    a short name for logs and ``ready`` (default: the folder's name).
``labels``
    class names in id order (default and only value: ``O COMMA PERIOD QUESTION``).
``label_position``
    ``"last"`` (default) or ``"first"``: the sub-token that carries a word's label.
``max_word_tokens``
    sub-tokens kept per word (default 16).
``window``
    ``{size, left, right}`` of the offline double-overlap windows (defaults:
    ``streampunct.core.windowing.WindowConfig``).
``stream_window``
    overrides of ``window`` for streaming windows (e.g. ``{"left": 25}``).
``artifact``
    the default artifact (``model.int8.onnx``).
``stream_artifact``
    the streaming graph (cached left context), e.g. ``model.stream.int8.onnx``.
``stream_cache_tokens``
    cached tokens per stream (default: the streaming window's left context).
``stream_cache``
    ``false``: ``--stream-cache auto`` serves whole windows (default true).
``case_margin``
    a number >= 0 (default 0): the truecasing head's CAPITALIZED becomes lower
    where its logit beats lower's by less (``streampunct.labels.case_classes``;
    tuned on validation by ``python -m training.case_margin``).
``tokenizer_sha256``
    the SHA-256 of the folder's ``tokenizer.json`` when it was built: loading
    checks it (a tokenizer of another model gives wrong labels silently).

The writer sorts keys and indents by two, as the shipped folders are written;
reading a file and writing it back gives the same JSON object.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engines.base import ArtifactError

METADATA_FILE = "streampunct.json"
WINDOW_KEYS: tuple[str, ...] = ("size", "left", "right")
LABEL_POSITIONS: tuple[str, ...] = ("last", "first")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class ModelMeta:
    """``streampunct.json`` as typed fields (None: the key is absent) and the rest of it.

    Attributes: the keys of the module doc; ``record`` holds every other key as read.
    """

    name: str | None = None
    labels: tuple[str, ...] | None = None
    label_position: str | None = None
    max_word_tokens: int | None = None
    window: Mapping[str, int] | None = None
    stream_window: Mapping[str, int] | None = None
    artifact: str | None = None
    stream_artifact: str | None = None
    stream_cache_tokens: int | None = None
    stream_cache: bool | None = None
    case_margin: float | None = None
    tokenizer_sha256: str | None = None
    record: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problem = self.problem()
        if problem:
            raise ArtifactError(f"{METADATA_FILE}: {problem}")

    def problem(self) -> str | None:
        """What is wrong with the typed fields, in one line (None: nothing)."""
        for name in ("name", "artifact", "stream_artifact"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                return f"{name} must be a string, not {value!r}"
        digest = self.tokenizer_sha256
        if digest is not None and not (isinstance(digest, str) and len(digest) == 64
                                       and all(c in "0123456789abcdef" for c in digest)):
            return f"tokenizer_sha256 must be 64 lowercase hex digits, not {digest!r}"
        if self.labels is not None and not all(isinstance(x, str) for x in self.labels):
            return f"labels must be a list of strings, not {list(self.labels)!r}"
        if self.label_position is not None and self.label_position not in LABEL_POSITIONS:
            return "label_position must be 'last' or 'first'"
        for name in ("max_word_tokens", "stream_cache_tokens"):
            value = getattr(self, name)
            if value is not None and (not _is_int(value) or value < 1):
                return f"{name} must be a positive integer, not {value!r}"
        if self.stream_cache is not None and not isinstance(self.stream_cache, bool):
            return f"stream_cache must be true or false, not {self.stream_cache!r}"
        if self.case_margin is not None and (
                not isinstance(self.case_margin, (int, float)) or isinstance(self.case_margin, bool)
                or not math.isfinite(self.case_margin) or self.case_margin < 0):
            return f"case_margin must be a number >= 0, not {self.case_margin!r}"
        for name in ("window", "stream_window"):
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, Mapping) or set(value) - set(WINDOW_KEYS) \
                    or not all(_is_int(v) for v in value.values()):
                return f"bad {name} {value!r} (an object whose keys are among size, left, right, with integers)"
        overlap = set(self.record) & {f.name for f in dataclasses.fields(self)}
        if overlap:
            return f"record holds typed keys {sorted(overlap)}"
        return None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str | Path = METADATA_FILE) -> ModelMeta:
        """Parse a ``streampunct.json`` object; ArtifactError naming ``where`` when it is malformed."""
        if not isinstance(data, Mapping):
            raise ArtifactError(f"{where} must hold a JSON object")
        typed = {f.name for f in dataclasses.fields(cls)} - {"record"}
        values: dict[str, Any] = {k: data[k] for k in typed if k in data and data[k] is not None}
        if isinstance(values.get("labels"), list):
            values["labels"] = tuple(values["labels"])
        elif "labels" in values:
            raise ArtifactError(f"{where}: labels must be a list of strings, not {values['labels']!r}")
        for name in ("window", "stream_window"):
            if isinstance(values.get(name), Mapping):
                values[name] = dict(values[name])
        record = {k: v for k, v in data.items() if k not in typed}
        try:
            return cls(**values, record=record)
        except ArtifactError as e:
            raise ArtifactError(f"{where}: {str(e).removeprefix(METADATA_FILE + ': ')}") from None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object: the record's keys and every typed field that is set."""
        out: dict[str, Any] = dict(self.record)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "record" or value is None:
                continue
            if f.name == "labels":
                value = list(value)
            elif f.name in ("window", "stream_window"):
                value = dict(value)
            out[f.name] = value
        return out

    def get(self, key: str, default: Any = None) -> Any:
        """Any key of the file, typed or in the record (``default`` where it is absent)."""
        if key != "record" and key in {f.name for f in dataclasses.fields(self)}:
            value = getattr(self, key)
            return default if value is None else self.to_dict()[key]
        return self.record.get(key, default)

    def replace(self, **changes: Any) -> ModelMeta:
        """A copy with ``changes``: typed fields by name, any other key into the record
        (a value of None removes the key)."""
        data = self.to_dict()
        for key, value in changes.items():
            if value is None:
                data.pop(key, None)
            else:
                data[key] = value
        return ModelMeta.from_dict(data)

    @property
    def uses_stream_cache(self) -> bool:
        """``--stream-cache auto`` runs cached left context: a streaming graph is named and
        ``stream_cache`` does not switch it off."""
        return bool(self.stream_artifact) and self.stream_cache is not False


def metadata_path(model_dir: str | Path) -> Path:
    return Path(model_dir) / METADATA_FILE


def has_model_meta(model_dir: str | Path) -> bool:
    """Whether ``model_dir`` holds a ``streampunct.json``."""
    return metadata_path(model_dir).is_file()


def read_model_meta(model_dir: str | Path) -> ModelMeta:
    """The folder's ``streampunct.json``; ArtifactError (one line) when it is missing or malformed."""
    path = metadata_path(model_dir)
    if not path.is_file():
        raise ArtifactError(f"{model_dir} is not a model folder: no {METADATA_FILE}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ArtifactError(f"cannot read {path}: {e}") from e
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{path}: invalid JSON ({e})") from None
    return ModelMeta.from_dict(data, path)


def write_model_meta(model_dir: str | Path, meta: ModelMeta | Mapping[str, Any]) -> Path:
    """Write ``streampunct.json`` into ``model_dir`` (replacing it whole, never half-written);
    a mapping is checked against the schema first. Returns the file's path."""
    if not isinstance(meta, ModelMeta):
        meta = ModelMeta.from_dict(meta)
    path = metadata_path(model_dir)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(meta.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def update_model_meta(model_dir: str | Path, **changes: Any) -> ModelMeta:
    """Read, :meth:`ModelMeta.replace`, write; returns what was written."""
    meta = read_model_meta(model_dir).replace(**changes)
    write_model_meta(model_dir, meta)
    return meta


TOKENIZER_FILE = "tokenizer.json"


def tokenizer_sha256(model_dir: str | Path) -> str:
    """The ``tokenizer_sha256`` of a folder's ``tokenizer.json`` (its contents' SHA-256)."""
    from engines.sidecar import sha256_file

    return sha256_file(Path(model_dir) / TOKENIZER_FILE)


def check_tokenizer(model_dir: str | Path, meta: ModelMeta) -> None:
    """An :class:`ArtifactError` when the folder's ``tokenizer.json`` is not the one ``meta``
    recorded (``tokenizer_sha256``; nothing to check where it recorded none or there is no file)."""
    tokenizer = Path(model_dir) / TOKENIZER_FILE
    if meta.tokenizer_sha256 is not None and tokenizer.is_file() \
            and tokenizer_sha256(model_dir) != meta.tokenizer_sha256:
        raise ArtifactError(f"{tokenizer} is not the tokenizer {model_dir} was built with (its sha256 "
                            f"differs from streampunct.json's tokenizer_sha256): restore it, or rebuild "
                            f"the folder")
