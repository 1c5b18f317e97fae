"""streampunct: real-time punctuation for streaming speech recognition output.

The Python API is :class:`Punctuator` (:mod:`streampunct.api`), imported on
first use so that ``import streampunct`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from streampunct.errors import StreampunctError
from streampunct.labels import LABELS

if TYPE_CHECKING:
    from streampunct.api import Punctuator, Stream
    from streampunct.text.normalize import join_texts

__all__ = ["LABELS", "Punctuator", "Stream", "StreampunctError", "__version__", "join_texts"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("Punctuator", "Stream"):
        from streampunct import api

        return getattr(api, name)
    if name == "join_texts":
        from streampunct.text.normalize import join_texts

        return join_texts
    raise AttributeError(f"module 'streampunct' has no attribute {name!r}")
