"""Runtime model folders: metadata (``streampunct.json``) and the tokenizer.

A model folder (the shipped one is ``models/default``) holds an ONNX
artifact with its JSON sidecar, ``tokenizer.json`` and ``streampunct.json``
(label map, label position, window defaults, and the training record). The
file's schema, reader and writer are :mod:`engines.model_meta`; this module
is the runtime's view of it (defaults applied, windows as ``WindowConfig``).

With a streaming graph (``stream_artifact``) ``--stream-cache auto`` runs
cached left context, keeping ``stream_cache_tokens`` tokens per stream,
unless the folder says ``"stream_cache": false`` (a boolean; absent: true):
training.window_tuning writes that when the cache, tuned on validation, falls
more than its guard under whole windows on a validation set. The graph stays,
for ``--stream-cache on``.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines.base import ArtifactError
from engines.model_meta import (
    METADATA_FILE,
    TOKENIZER_FILE,
    ModelMeta,
    check_tokenizer,
    read_model_meta,
)
from engines.registry import own_model
from streampunct.core.alignment import Aligner
from streampunct.core.windowing import MAX_POSITIONS, WindowConfig
from streampunct.errors import ModelError
from streampunct.labels import LABELS

#: The shipped default model, in the repository's ``models/``.
DEFAULT_MODEL_DIR = Path(__file__).resolve().parent.parent / "models" / "default"
#: The environment variable that names another default model folder.
MODEL_ENV = "STREAMPUNCT_MODEL"


def default_model_dir() -> Path:
    """The model folder used when none is given: ``$STREAMPUNCT_MODEL`` as it is set now (an
    empty value counts as unset), else the shipped :data:`DEFAULT_MODEL_DIR`."""
    return Path(os.environ.get(MODEL_ENV) or DEFAULT_MODEL_DIR).expanduser()


@dataclass(frozen=True)
class ModelInfo:
    """What the runtime needs to know about a model folder.

    Attributes:
        path: the folder (of a backend's own model, :func:`load_model_info` with ``backend``:
            the folder that holds its tokenizer).
        name: a short name for logs and ``ready`` messages.
        labels: class names in id order (must equal :data:`LABELS`).
        label_position: ``"last"`` or ``"first"`` sub-token carries a word's label.
        window: default double-overlap window geometry (tuned on validation data).
        stream_window: the geometry of streaming windows (the server's, and the
            simulations of it): ``window`` with the overrides of the sidecar's
            ``stream_window`` (e.g. ``{"left": 20}``: less left context per
            decision, fewer tokens per finalized word), tuned on live validation.
        max_word_tokens: sub-tokens kept per word.
        meta: the whole ``streampunct.json``, parsed (:class:`engines.model_meta.ModelMeta`).
    """

    path: Path
    name: str
    labels: tuple[str, ...]
    label_position: str
    window: WindowConfig
    max_word_tokens: int
    meta: ModelMeta
    stream_window: WindowConfig | None = None

    def __post_init__(self) -> None:
        if self.stream_window is None:
            object.__setattr__(self, "stream_window", self.window)

    @property
    def metadata(self) -> dict[str, Any]:
        """The whole ``streampunct.json`` as a JSON object (a copy; :attr:`meta` is its typed form)."""
        return self.meta.to_dict()

    @property
    def stream_cache_auto(self) -> bool:
        """Whether ``--stream-cache auto`` runs cached left context with this folder: it has
        a streaming graph (``stream_artifact``) and does not switch it off (``"stream_cache":
        false``; see the module doc)."""
        return self.meta.uses_stream_cache

    @property
    def case_margin(self) -> float:
        """The truecasing head's margin for capitals (``case_margin``; 0: the plain argmax;
        see :func:`streampunct.labels.case_classes`)."""
        return float(self.meta.case_margin or 0.0)

    def aligner(self) -> Aligner:
        try:
            check_tokenizer(self.path, self.meta)
        except ArtifactError as e:
            raise ModelError(str(e)) from None
        return Aligner.from_file(
            self.path / TOKENIZER_FILE,
            label_position=self.label_position,  # type: ignore[arg-type]
            max_word_tokens=self.max_word_tokens,
        )


def model_folder_argument(text: str) -> Path:
    """A ``--model DIR`` argument (argparse's ``type``): a folder's path, not an empty string
    (``--model "$UNSET"`` would read the current folder as the model)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a model folder, got an empty string")
    return Path(text)


def load_model_info(model_dir: str | Path | None = None, *, backend: str | None = None) -> ModelInfo:
    """Read ``streampunct.json`` of a model folder, with clear errors.

    ``backend``: the engine backend that will serve it. One that serves a model of its own
    (``fake``; :func:`engines.registry.own_model`) gives that model instead, which needs no
    model folder: its name and windows, with the ``tokenizer.json`` of ``model_dir`` when given
    (nothing else of the folder is read), else the backend's own, else the shipped model's.
    """
    if model_dir is not None and not isinstance(model_dir, str | os.PathLike):
        raise ModelError(f"a model folder is a path, not {type(model_dir).__name__} {model_dir!r}")
    if backend is not None:
        own = own_model(backend, model_dir)
        if own is not None:
            return _own_model_info(backend, *own)
    # "~" is expanded here as a shell would (the Python API and a quoted $STREAMPUNCT_MODEL)
    path = Path(model_dir).expanduser() if model_dir is not None else default_model_dir()
    meta_path = path / METADATA_FILE
    if path.exists() and not path.is_dir():
        raise ModelError(f"model folder {path} is not a folder (a model is a folder with streampunct.json)")
    if not path.is_dir():
        hint = ""
        if model_dir is None:
            hint = (f" (from {MODEL_ENV}; unset it for the shipped model)" if os.environ.get(MODEL_ENV)
                    else " (the shipped model: the models are in the repository's models/ folder, not in an "
                         "installed package; give a model folder with --model or STREAMPUNCT_MODEL)")
        shipped = DEFAULT_MODEL_DIR.parent / path.name
        if model_dir is not None and not path.is_absolute() and (shipped / METADATA_FILE).is_file():
            hint = f" in {Path.cwd()}; the shipped model of that name is {shipped}"
        raise ModelError(f"model folder {path} does not exist{hint}")
    if not meta_path.is_file():
        raise ModelError(f"{path} is not a streampunct model folder: no streampunct.json")
    try:
        meta = read_model_meta(path)
        _check_named_files(path, meta)
    except ArtifactError as e:
        raise ModelError(str(e)) from None
    return _model_info(path, meta, path.name, meta_path)


def _check_named_files(path: Path, meta: ModelMeta) -> None:
    """The files ``streampunct.json`` names (``artifact``, ``stream_artifact``) lie inside the folder."""
    from engines.registry import folder_file

    for key in ("artifact", "stream_artifact"):
        name = getattr(meta, key)
        if name is not None:
            folder_file(path, name, f"{path / METADATA_FILE}: {key}")


def _check_positions(window: WindowConfig, key: str, where: str | Path) -> None:
    """A window the encoders can see whole (``size + 2`` tokens within :data:`MAX_POSITIONS`) that
    decides some tokens of its own: more than its ``left`` and ``right`` context together."""
    if window.step < 1:
        raise ModelError(f"{where}: {key} size {window.size} leaves no tokens to decide between left "
                         f"{window.left} and right {window.right} (size must be > left + right)")
    if window.size + 2 > MAX_POSITIONS:
        raise ModelError(f"{where}: {key} size {window.size} is too large: the model sees size + 2 tokens and "
                         f"has {MAX_POSITIONS} positions (size <= {MAX_POSITIONS - 2})")


def _own_model_info(backend: str, meta: ModelMeta, folder: Path | None) -> ModelInfo:
    """The model a backend serves on its own, its tokenizer in ``folder`` (None: the shipped model's)."""
    folder = folder if folder is not None else default_model_dir()
    if not (folder / "tokenizer.json").is_file():
        raise ModelError(f"the {backend} engine needs a tokenizer: no tokenizer.json in {folder} "
                         "(pass a folder that holds one as the model)")
    return _model_info(folder, meta, backend, f"the {backend} backend's model")


def _model_info(path: Path, meta: ModelMeta, default_name: str, where: str | Path) -> ModelInfo:
    """:class:`ModelInfo` of ``meta`` (defaults applied, windows checked) with the tokenizer in ``path``."""
    labels = meta.labels if meta.labels is not None else LABELS
    if labels != LABELS:
        raise ModelError(f"{where}: labels {labels} differ from {LABELS}")
    win = meta.window or {}
    try:
        window = WindowConfig(**win)
    except (TypeError, ValueError) as e:
        raise ModelError(f"{where}: bad window {dict(win)!r} ({e})") from None
    sw = meta.stream_window or {}
    try:
        stream_window = WindowConfig(**{**window.to_dict(), **sw})
    except (TypeError, ValueError) as e:
        raise ModelError(f"{where}: bad stream_window {dict(sw)!r} ({e})") from None
    _check_positions(window, "window", where)
    _check_positions(stream_window, "stream_window", where)
    return ModelInfo(
        path=path,
        name=meta.name if meta.name is not None else default_name,
        labels=labels,
        label_position=meta.label_position or "last",
        window=window,
        max_word_tokens=meta.max_word_tokens or 16,
        meta=meta,
        stream_window=stream_window,
    )
