"""Backend options: each backend's settings are a frozen dataclass, built from the caller's
mapping by :func:`make_options`, which names unknown options and mistyped values in one line.

Apart from :mod:`engines.registry` so that the backends it loads by name need not import
it back.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from engines.base import EngineError

#: What a value of an option's type is called in messages.
_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string", tuple: "a list"}


def _fits(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the annotated type ``hint`` (types the options use; others pass)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    kind = typing.get_origin(hint) or hint
    if kind is type(None):
        return value is None
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is tuple:
        return isinstance(value, tuple | list)
    return isinstance(value, kind) if kind in _TYPE_NAMES else True


def _type_name(hint: Any) -> str:
    args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    kinds = [typing.get_origin(a) or a for a in args if a is not type(None)]
    return " or ".join(_TYPE_NAMES.get(k, getattr(k, "__name__", str(k))) for k in kinds)


def make_options(cls: type, options: Mapping[str, Any], backend: str) -> Any:
    """Build a backend's frozen options dataclass, naming unknown options and mistyped values."""
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise EngineError(
            f"unknown option(s) {', '.join(unknown)} for the {backend} backend; "
            f"valid: {', '.join(sorted(fields))}"
        )
    hints = typing.get_type_hints(cls)
    for name, value in options.items():
        if not _fits(value, hints[name]):
            raise EngineError(f"option {name} of the {backend} backend must be {_type_name(hints[name])}, "
                              f"got {value!r}")
    values = dict(options)
    if "providers" in values and isinstance(values["providers"], list):
        values["providers"] = tuple(values["providers"])
    return cls(**values)
