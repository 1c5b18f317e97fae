"""Runtime model folders: metadata (``streampunct.json``) and the tokenizer.

A model folder (the shipped one is ``models/default``) holds an ONNX
artifact with its JSON sidecar, ``tokenizer.json`` and ``streampunct.json``
(label map, label position, window defaults, and the training record).

With a streaming graph (``stream_artifact``) ``--stream-cache auto`` runs
cached left context, keeping ``stream_cache_tokens`` tokens per stream,
unless the folder says ``"stream_cache": false`` (a boolean; absent: true):
training.window_tuning writes that when the cache, tuned on validation, falls
more than its guard under whole windows on a validation set. The graph stays,
for ``--stream-cache on``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from streampunct.alignment import Aligner
from streampunct.errors import ModelError
from streampunct.labels import LABELS
from streampunct.windowing import WindowConfig

#: The shipped default model (override with STREAMPUNCT_MODEL).
DEFAULT_MODEL_DIR = Path(
    os.environ.get("STREAMPUNCT_MODEL", Path(__file__).resolve().parent.parent / "models" / "default")
)


@dataclass(frozen=True)
class ModelInfo:
    """What the runtime needs to know about a model folder.

    Attributes:
        path: the folder.
        name: a short name for logs and ``ready`` messages.
        labels: class names in id order (must equal :data:`LABELS`).
        label_position: ``"last"`` or ``"first"`` sub-token carries a word's label.
        window: default double-overlap window geometry (tuned on validation data).
        stream_window: the geometry of streaming windows (the server's, and the
            simulations of it): ``window`` with the overrides of the sidecar's
            ``stream_window`` (e.g. ``{"left": 20}``: less left context per
            decision, fewer tokens per finalized word), tuned on live validation.
        max_word_tokens: sub-tokens kept per word.
        metadata: the whole ``streampunct.json``.
    """

    path: Path
    name: str
    labels: tuple[str, ...]
    label_position: str
    window: WindowConfig
    max_word_tokens: int
    metadata: dict
    stream_window: WindowConfig | None = None

    def __post_init__(self) -> None:
        if self.stream_window is None:
            object.__setattr__(self, "stream_window", self.window)

    @property
    def stream_cache_auto(self) -> bool:
        """Whether ``--stream-cache auto`` runs cached left context with this folder: it has
        a streaming graph (``stream_artifact``) and does not switch it off (``"stream_cache":
        false``; see the module doc)."""
        return bool(self.metadata.get("stream_artifact")) and self.metadata.get("stream_cache", True) is not False

    def aligner(self) -> Aligner:
        return Aligner.from_file(
            self.path / "tokenizer.json",
            label_position=self.label_position,  # type: ignore[arg-type]
            max_word_tokens=self.max_word_tokens,
        )


def load_model_info(model_dir: str | Path | None = None) -> ModelInfo:
    """Read ``streampunct.json`` of a model folder, with clear errors."""
    path = Path(model_dir) if model_dir is not None else DEFAULT_MODEL_DIR
    meta_path = path / "streampunct.json"
    if path.exists() and not path.is_dir():
        raise ModelError(f"model folder {path} is not a folder (a model is a folder with streampunct.json)")
    if not path.is_dir():
        hint = " (the shipped model; see README for how to build it)" if model_dir is None else ""
        raise ModelError(f"model folder {path} does not exist{hint}")
    if not meta_path.is_file():
        raise ModelError(f"{path} is not a streampunct model folder: no streampunct.json")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ModelError(f"{meta_path}: invalid JSON ({e})") from None
    labels = tuple(meta.get("labels", LABELS))
    if labels != LABELS:
        raise ModelError(f"{meta_path}: labels {labels} differ from {LABELS}")
    win = meta.get("window") or {}
    try:
        window = WindowConfig(**{k: int(v) for k, v in win.items() if k in ("size", "left", "right")})
    except (TypeError, ValueError) as e:
        raise ModelError(f"{meta_path}: bad window {win!r} ({e})") from None
    sw = meta.get("stream_window") or {}
    try:
        if not isinstance(sw, dict) or set(sw) - {"size", "left", "right"}:
            raise TypeError("keys must be among size, left, right")
        stream_window = WindowConfig(**{**window.to_dict(), **{k: int(v) for k, v in sw.items()}})
    except (TypeError, ValueError) as e:
        raise ModelError(f"{meta_path}: bad stream_window {sw!r} ({e})") from None
    if not isinstance(meta.get("stream_cache", True), bool):
        raise ModelError(f"{meta_path}: stream_cache must be true or false, not {meta['stream_cache']!r}")
    label_position = meta.get("label_position", "last")
    if label_position not in ("last", "first"):
        raise ModelError(f"{meta_path}: label_position must be 'last' or 'first'")
    return ModelInfo(
        path=path,
        name=str(meta.get("name", path.name)),
        labels=labels,
        label_position=label_position,
        window=window,
        max_word_tokens=int(meta.get("max_word_tokens", 16)),
        metadata=meta,
        stream_window=stream_window,
    )
