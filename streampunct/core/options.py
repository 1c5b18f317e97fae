"""Session options: one frozen dataclass shared by the wire protocol and the stream state.

The ``config`` object on the wire, the server's session defaults and the
latency options of :class:`~streampunct.core.stream_state.StreamState` are the same
thing; ``stream_state.SessionOptions`` is another name for this class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SessionOptions:
    """Effective options of one session (the ``config`` object on the wire).

    Attributes:
        right_context: words after a word that make it decidable (final).
        max_delay_ms: a word is decidable at the latest this long after it
            arrived, whatever came after it.
        partials: send ``partial`` messages for the undecided tail.
        capitalize: capitalize sentence starts (and "I") in ``text``.
        itn: write numbers, dates, times and money in ``text`` as digits
            and symbols (inverse text normalization; ``streampunct.text.itn``).
        lexicon: the session's ``(spoken, written)`` pairs, spoken as
            normalized words joined by one space
            (:func:`streampunct.text.written_form.normalize_lexicon`); they apply
            over the server's own lexicon.
    """

    # Defaults chosen on validation for live use (docs/results.md, "Live use"): a 4-word ASR
    # chunk at 2.5 words/s spans 1.6 s, so a shorter delay bound decides the last words of
    # chunks with no right context.
    right_context: int = 3
    max_delay_ms: int = 2000
    partials: bool = False
    capitalize: bool = False
    itn: bool = False
    lexicon: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if self.right_context < 0:
            raise ValueError("right_context must be >= 0")
        if self.max_delay_ms < 0:
            raise ValueError("max_delay_ms must be >= 0")

    def to_json(self, *, itn_available: bool = True) -> dict[str, Any]:
        """The effective options on the wire; ``itn_available`` False (a server without the ITN
        grammars) leaves ``itn`` out: the protocol has a server name only what it supports."""
        out = {
            "right_context": self.right_context,
            "max_delay_ms": self.max_delay_ms,
            "partials": self.partials,
            "capitalize": self.capitalize,
            "itn": self.itn,
            "lexicon": [list(pair) for pair in self.lexicon],
        }
        if not itn_available:
            del out["itn"]
        return out
