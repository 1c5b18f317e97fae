"""An asyncio client for the streaming protocol, plus transcript and latency bookkeeping.

::

    async with await StreamClient.connect(url, right_context=2) as client:
        await client.send_words(["hello", "world"])
        await client.end()
        async for message in client:
            ...

:class:`Transcript` folds ``final``/``partial`` messages into the stream's
words and marks, checking that finals are contiguous and never revised.
:class:`LatencyTracker` measures, per word, the time from sending it to
receiving its final, and the *margin*: the time from the moment the latency
contract made the word decidable (as the client saw it) to its final.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field

from websockets import ConnectionClosed
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect

from streampunct.errors import StreampunctError
from streampunct.labels import ID_TO_MARK
from streampunct.latency import decidable_times
from streampunct.protocol import (
    ConfigApplied,
    ConfigRequest,
    Ended,
    EndRequest,
    Error,
    Final,
    Flushed,
    FlushRequest,
    HypothesisMessage,
    Partial,
    PunctuatedWord,
    Ready,
    ServerMessage,
    SessionOptions,
    Word,
    WordsMessage,
    decode_server,
    encode,
)
from streampunct.text import normalize_word, render


class ClientError(StreampunctError):
    """The server answered unexpectedly (an error, or a message out of protocol)."""


class StreamClient:
    """One streaming session seen from the client.

    Attributes:
        ready: the server's ``ready`` message (session id, model, default options).
        options: the effective session options.
    """

    def __init__(self, connection: ClientConnection, ready: Ready) -> None:
        self.connection = connection
        self.ready = ready
        self.options: SessionOptions = ready.config

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        token: str | None = None,
        open_timeout: float = 10.0,
        max_size: int | None = 1 << 24,
        right_context: int | None = None,
        max_delay_ms: int | None = None,
        partials: bool | None = None,
        capitalize: bool | None = None,
        ping_timeout: float | None = None,
    ) -> StreamClient:
        """Open a session; session options given here are sent as ``config`` before returning.

        ``ping_timeout``: close when a keepalive pong is this late (None, the
        default: never). A client that sends faster than the server finalizes
        is held back by TCP (the server stops reading at its backlog limit),
        and its pings wait behind the words it already sent: a ping timeout
        would drop a healthy connection. See docs/server.md, "Bounded resources".
        """
        headers = {"Authorization": f"Bearer {token}"} if token else None
        connection = await ws_connect(
            url, additional_headers=headers, open_timeout=open_timeout, max_size=max_size,
            ping_timeout=ping_timeout,
        )
        try:
            first = decode_server(await asyncio.wait_for(connection.recv(), open_timeout))
            if not isinstance(first, Ready):
                raise ClientError(f"expected 'ready' first, got {first.type!r}")
            client = cls(connection, first)
            request = ConfigRequest(right_context, max_delay_ms, partials, capitalize)
            if request.to_json().keys() != {"type"}:
                await client.configure(request)
        except BaseException:
            await connection.close()
            raise
        return client

    @property
    def session(self) -> str:
        return self.ready.session

    async def configure(self, request: ConfigRequest) -> SessionOptions:
        """Send ``config`` and wait for the effective options (only before any words)."""
        await self.send(request)
        reply = await self.recv()
        if isinstance(reply, Error):
            raise ClientError(f"config refused: {reply.code}: {reply.message}")
        if not isinstance(reply, ConfigApplied):
            raise ClientError(f"expected 'config', got {reply.type!r}")
        self.options = reply.config
        return reply.config

    async def send(
        self, message: ConfigRequest | WordsMessage | HypothesisMessage | FlushRequest | EndRequest
    ) -> None:
        await self.connection.send(encode(message))

    async def send_raw(self, frame: str | bytes) -> None:
        """Send a frame as is (tests use this to send malformed input)."""
        await self.connection.send(frame)

    async def send_words(self, words: Sequence[str | Word]) -> None:
        await self.send(WordsMessage(tuple(w if isinstance(w, Word) else Word(w) for w in words)))

    async def send_hypothesis(self, words: Sequence[str | Word]) -> None:
        """Replace the interim hypothesis (an empty list clears it)."""
        await self.send(HypothesisMessage(tuple(w if isinstance(w, Word) else Word(w) for w in words)))

    async def flush(self) -> None:
        await self.send(FlushRequest())

    async def end(self) -> None:
        await self.send(EndRequest())

    async def recv(self, timeout: float | None = None) -> ServerMessage:
        """The next server message; raises ``ConnectionClosed`` when the session is over."""
        return decode_server(await asyncio.wait_for(self.connection.recv(), timeout))

    async def __aiter__(self) -> AsyncIterator[ServerMessage]:
        """Server messages until the connection closes."""
        while True:
            try:
                yield await self.recv()
            except ConnectionClosed:
                return

    @property
    def close_code(self) -> int | None:
        return self.connection.close_code

    async def close(self) -> None:
        await self.connection.close()

    async def __aenter__(self) -> StreamClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


def _mark_to_label(mark: str) -> int:
    try:
        return ID_TO_MARK.index(mark)
    except ValueError:
        raise ClientError(f"unknown punctuation mark {mark!r} from the server") from None


@dataclass
class Transcript:
    """The stream as the client knows it: final words and marks, and the provisional tail.

    Attributes:
        words: final words (as the server normalized them), in stream order.
        labels: their label ids.
        partial: the latest provisional tail (words after the finals).
        hypothesis: the latest partial's punctuated interim hypothesis.
        final_words: every final word as received (with echoed start/end).
        written: each final word as the server wrote it in its final's ``text``
            (sentence capitals, and the case a truecasing head learned:
            ``NASA``, ``New York``; :func:`written_forms`).
        flushed_upto, ended_words: from ``flushed`` and ``end``.
        errors: ``error`` messages received.
    """

    words: list[str] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    partial: list[PunctuatedWord] = field(default_factory=list)
    partial_start: int = 0
    hypothesis: list[PunctuatedWord] = field(default_factory=list)
    final_words: list[PunctuatedWord] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    flushed_upto: int = 0
    ended_words: int | None = None
    errors: list[Error] = field(default_factory=list)

    def apply(self, message: ServerMessage) -> None:
        """Fold one server message in; raises :class:`ClientError` on a protocol violation."""
        if isinstance(message, Final):
            if message.start != len(self.words):
                raise ClientError(
                    f"final for words from {message.start}, but {len(self.words)} words are final"
                )
            self.words.extend(w.w for w in message.words)
            self.labels.extend(_mark_to_label(w.p) for w in message.words)
            self.final_words.extend(message.words)
            self.written.extend(written_forms(message))
        elif isinstance(message, Partial):
            self.partial, self.partial_start = list(message.words), message.start
            self.hypothesis = list(message.hypothesis)
        elif isinstance(message, Flushed):
            self.flushed_upto = message.upto
        elif isinstance(message, Ended):
            self.ended_words = message.words
        elif isinstance(message, Error):
            self.errors.append(message)

    @property
    def n_final(self) -> int:
        return len(self.words)

    @property
    def tail(self) -> list[PunctuatedWord]:
        """Provisional words not yet covered by finals."""
        skip = max(0, self.n_final - self.partial_start)
        return self.partial[skip:]

    def text(self, *, capitalize: bool = False) -> str:
        """The final words rendered with their punctuation; with ``capitalize``, written as the
        server wrote them (learned case) and with sentence capitals."""
        return render(self.written if capitalize else self.words, self.labels, capitalize=capitalize)


def written_forms(message: Final) -> list[str]:
    """Each word of a ``final`` as its ``text`` writes it (case included).

    ``text`` is the words with their marks, clitics joined to the word before
    them; a word whose written form cannot be matched letter for letter (a
    server that renders otherwise) keeps its normalized ``w``.
    """
    words = [w.w for w in message.words]
    out: list[str] = []
    k = 0
    for token in message.text.split():
        core, pos = token.rstrip(",.?"), 0
        while k < len(words) and pos < len(core):
            piece = core[pos : pos + len(words[k])]
            if piece.lower() != words[k]:
                return words
            out.append(piece)
            pos += len(piece)
            k += 1
        if pos != len(core):
            return words
    return out if k == len(words) else words


@dataclass(frozen=True)
class LatencySummary:
    """Percentiles in milliseconds over the words that got a final.

    Attributes:
        words: how many words were measured.
        latency: from sending a word to receiving its final (p50, p95, p99, max).
        margin: from the word becoming decidable (client's view) to its final.
    """

    words: int
    latency: tuple[float, float, float, float]
    margin: tuple[float, float, float, float]

    def format(self) -> str:
        def q(v: tuple[float, float, float, float]) -> str:
            return f"p50 {v[0]:.0f} ms, p95 {v[1]:.0f} ms, p99 {v[2]:.0f} ms, max {v[3]:.0f} ms"

        return f"{self.words} words; word->final latency: {q(self.latency)}; margin after decidable: {q(self.margin)}"


def _percentiles(values: Sequence[float]) -> tuple[float, float, float, float]:
    if not values:
        return (math.nan,) * 4  # type: ignore[return-value]
    ordered = sorted(values)

    def at(p: float) -> float:
        return 1000.0 * ordered[min(len(ordered) - 1, int(math.ceil(p * len(ordered))) - 1)]

    return at(0.50), at(0.95), at(0.99), 1000.0 * ordered[-1]


class LatencyTracker:
    """Per-word send/final times (seconds from ``loop.time()``), client side.

    Words are counted as the server counts them: raw words that normalize to
    nothing are skipped.
    """

    def __init__(self, options: SessionOptions) -> None:
        self.options = options
        self.sent_at: list[float] = []
        self.final_at: list[float] = []
        # Flushes in the order sent: words sent before each, and when.
        self._flush_upto: list[int] = []
        self._flush_at: list[float] = []

    def words_sent(self, words: Sequence[str], now: float) -> None:
        self.sent_at.extend(now for w in words if normalize_word(w))

    def flush_sent(self, now: float) -> None:
        self._flush_upto.append(len(self.sent_at))
        self._flush_at.append(now)

    def final_received(self, message: Final, now: float) -> None:
        self.final_at.extend(now for _ in message.words)

    def decidable_at(self, index: int) -> float:
        """When word ``index`` became decidable under the session's latency contract."""
        return float(self.decidable()[index])

    def decidable(self) -> list[float]:
        """When each word sent so far became decidable (:func:`streampunct.latency.decidable_times`)."""
        times = decidable_times(self.sent_at, self.options.right_context, self.options.max_delay_ms,
                                list(zip(self._flush_upto, self._flush_at, strict=True)))
        return times.tolist()

    def summary(self) -> LatencySummary:
        n = min(len(self.final_at), len(self.sent_at))
        latency = [self.final_at[i] - self.sent_at[i] for i in range(n)]
        decidable = self.decidable()
        margin = [self.final_at[i] - decidable[i] for i in range(n)]
        return LatencySummary(n, _percentiles(latency), _percentiles(margin))
