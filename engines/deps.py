"""Lazy imports of optional dependencies, with an error that says what to install."""

from __future__ import annotations

import importlib
import importlib.util
from importlib import metadata
from types import ModuleType

from engines.base import DependencyMissing

#: import name -> (pip extra of streampunct, the package itself)
_INSTALL: dict[str, tuple[str | None, str]] = {
    "onnxruntime": (None, "onnxruntime"),
    "numpy": (None, "numpy"),
    "tokenizers": (None, "tokenizers"),
    "torch": ("train", "torch"),
    "transformers": ("train", "transformers"),
    "onnx": ("train", "onnx"),
    "onnxscript": ("train", "onnxscript"),
    "tensorrt": ("tensorrt", "tensorrt"),
    "pycuda": ("tensorrt", "pycuda"),
    "modelopt": ("tensorrt", "nvidia-modelopt[onnx]"),
    "tritonclient": ("triton", "tritonclient[grpc]"),
    "grpc": ("triton", "tritonclient[grpc]"),
    "pytriton": ("triton-server", "nvidia-pytriton"),
}

#: Distributions whose versions go into every sidecar's ``tool_versions``.
_VERSIONED = (
    "numpy", "onnx", "onnxruntime", "torch", "transformers", "tokenizers",
    "nvidia-modelopt", "tensorrt", "pycuda",
)


def extra_hint(extra: str) -> str:
    """The pip command that installs one of the project's extras. streampunct is installed from
    its repository (its models are there), not from the package index."""
    return f"pip install -e '.[{extra}]' in the streampunct checkout"


def install_hint(module: str, *more: str) -> str:
    """The pip command that provides import names (the extra of the first, and every package)."""
    extra, _ = _INSTALL.get(module.split(".")[0], (None, module))
    packages = list(dict.fromkeys(_INSTALL.get(m.split(".")[0], (None, m))[1] for m in (module, *more)))
    if extra is None:
        return f"pip install {' '.join(packages)}"
    return f"{extra_hint(extra)} (or: pip install {' '.join(repr(p) for p in packages)})"


def is_installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, *, feature: str) -> ModuleType:
    """Import ``module`` or raise DependencyMissing naming ``feature`` and the pip extra."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise DependencyMissing(
            f"{feature} needs the Python package {module!r}, which is not installed "
            f"or failed to import ({e}); install it with: {install_hint(module)}"
        ) from e


def tool_versions() -> dict[str, str]:
    """Installed versions of the tools that shape an artifact (absent ones omitted)."""
    import platform

    versions = {"python": platform.python_version()}
    for dist in _VERSIONED:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return versions
