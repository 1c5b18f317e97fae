"""An asyncio client for the streaming protocol, plus transcript and latency bookkeeping.

::

    async with await StreamClient.connect(url, right_context=2) as client:
        await client.send_words(["hello", "world"])
        await client.end()
        async for message in client:
            ...

:class:`StreamClient` is one connection. :class:`ResumableStream` is a
stream that outlives its connections: it keeps every word it sent until the
word's final arrives and, when the connection drops or the server closes it
with 1001, 1011, 1012 or 1013, reconnects with backoff and continues the
stream with ``resume`` (protocol "Resuming a stream"), so that no word is
lost and none is finalized twice. It does the same when the server goes
silent while it owes finals (:data:`SILENCE_TIMEOUT_S`): a server that hangs
without closing its socket sends no close frame and no reset.

:class:`Transcript` folds ``final``/``partial`` messages into the stream's
words and marks, checking that finals are contiguous and never revised.
:class:`LatencyTracker` measures, per word, the time from sending it to
receiving its final, and the *margin*: the time from the moment the latency
contract made the word decidable (as the client saw it) to its final.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import random
import ssl
import urllib.parse
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

from websockets import ConnectionClosed
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

from streampunct.core.latency import decidable_times
from streampunct.core.wire import (
    DEFAULT_LIMITS,
    IDLE_TIMEOUT_REASON,
    ConfigApplied,
    ConfigRequest,
    Ended,
    EndRequest,
    Error,
    ErrorCode,
    Extension,
    Final,
    Flushed,
    FlushRequest,
    HypothesisMessage,
    Limits,
    Message,
    Partial,
    PunctuatedWord,
    Ready,
    Resumed,
    ResumeRequest,
    ServerMessage,
    SessionOptions,
    Word,
    WordsMessage,
    decode_config,
    decode_server,
    encode,
    encode_frame,
)
from streampunct.errors import StreampunctError
from streampunct.labels import ID_TO_MARK
from streampunct.text.normalize import (
    normalize_word,
    render,
    sending_form,
    spelled_pieces,
    symbol_word,
)
from streampunct.text.written_form import ITN_UNAVAILABLE, normalize_lexicon

logger = logging.getLogger(__name__)

#: A resumed connection that lasted this long (seconds) counts as the stream moving on, for a
#: stream that owes nothing: its reconnect attempts start again from zero.
STABLE_CONNECTION_S = 30.0

#: How long (seconds) a :class:`ResumableStream` waits, past the moment a final (or ``flushed``,
#: or ``end``) became due under the latency contract, with nothing at all from the server,
#: before it takes the connection for lost (``silence_timeout_s``; None or 0: never).
SILENCE_TIMEOUT_S = 30.0

#: ``on_message(direction, message)``: ``direction`` is ``"send"`` or ``"recv"``.
MessageTap = Callable[[str, Message], None]


class ClientError(StreampunctError):
    """The server answered unexpectedly (an error, or a message out of protocol)."""


class StreamClient:
    """One streaming session seen from the client.

    Attributes:
        ready: the server's ``ready`` message (session id, model, default options).
        options: the effective session options.
    """

    def __init__(self, connection: ClientConnection, ready: Ready,
                 on_message: MessageTap | None = None) -> None:
        self.connection = connection
        self.ready = ready
        self.options: SessionOptions = ready.config
        self.on_message = on_message

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
        itn: bool | None = None,
        lexicon: Sequence[tuple[str, str]] | None = None,
        on_message: MessageTap | None = None,
    ) -> StreamClient:
        """Open a session; session options given here are sent as ``config`` before returning.

        ``on_message(direction, message)`` sees every message sent (``"send"``) and received
        (``"recv"``, ``ready`` first), as it goes; ``caption --json`` logs them so.

        ``lexicon``: ``(spoken, written)`` pairs (normalized here; a bad pair raises ``ValueError``).

        ``ping_timeout``: close when a keepalive pong is this late (None, the
        default: never). A client that sends faster than the server finalizes
        is held back by TCP (the server stops reading at its backlog limit),
        and its pings wait behind the words it already sent: a ping timeout
        would drop a healthy connection. See docs/server.md, "Bounded resources".
        (:class:`ResumableStream` finds a server that hangs by its silence instead:
        ``silence_timeout_s``.)
        """
        headers = {"Authorization": f"Bearer {token}"} if token else None
        connection = await ws_connect(
            url, additional_headers=headers, open_timeout=open_timeout, max_size=max_size,
            ping_timeout=ping_timeout,
        )
        try:
            first = decode_server(await asyncio.wait_for(connection.recv(), open_timeout))
            if on_message is not None:
                on_message("recv", first)
            if not isinstance(first, Ready):
                raise ClientError(f"expected 'ready' first, got {first.type!r}")
            client = cls(connection, first, on_message)
            request = ConfigRequest(right_context, max_delay_ms, partials, capitalize, itn,
                                    None if lexicon is None else normalize_lexicon(lexicon))
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
        """Send ``config`` and wait for the effective options (only before any words).

        Raises :class:`ClientError` when the server refuses them, or when ``itn`` was asked
        for and the server's answer has it off (a server without ITN grammars ignores it)."""
        await self.send(request)
        reply = await self.recv()
        if isinstance(reply, Error):
            raise ClientError(f"config refused: {reply.code}: {reply.message}")
        if not isinstance(reply, ConfigApplied):
            raise ClientError(f"expected 'config', got {reply.type!r}")
        if request.itn and not reply.config.itn:
            raise ClientError(f"{ITN_UNAVAILABLE} (its config answer has no itn)")
        self.options = reply.config
        return reply.config

    async def send(
        self, message: ConfigRequest | WordsMessage | HypothesisMessage | FlushRequest | EndRequest | ResumeRequest
    ) -> None:
        frame = encode(message)
        # shown before the await: a send held by backpressure could otherwise be shown after the
        # server's answer to it (a send that then fails ends the connection, which is shown too)
        if self.on_message is not None:
            self.on_message("send", message)
        await self.connection.send(frame)

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
        """The next server message; raises ``ConnectionClosed`` when the session is over.
        Messages of a type this client does not know (a newer server's) are skipped."""
        async with asyncio.timeout(timeout):
            while True:
                message = self.received(await self.connection.recv())
                if not isinstance(message, Extension):
                    return message
                logger.debug("skipped a server message of unknown type %r", message.type)

    def received(self, frame: str | bytes) -> ServerMessage:
        """A frame read from this connection, decoded (and shown to ``on_message``)."""
        message = decode_server(frame)
        if self.on_message is not None:
            self.on_message("recv", message)
        return message

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

    @property
    def close_reason(self) -> str | None:
        return self.connection.close_reason

    async def close(self) -> None:
        await self.connection.close()

    def abort(self) -> None:
        """Drop the connection now, without the closing handshake: a server that does not
        answer holds nothing up (a :meth:`close` after this returns at once)."""
        self.connection.transport.abort()

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
        texts: each final's ``(start, end, text)``, the text as the server sent it
            (with ``itn`` or a lexicon it writes phrases, "$25", "New York",
            which may take words of earlier finals: docs/protocol.md).
        partial_text: the latest partial's ``text``.
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
    texts: list[tuple[int, int, str]] = field(default_factory=list)
    partial_text: str = ""
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
            self.texts.append((message.start, len(self.words), message.text))
        elif isinstance(message, Partial):
            self.partial, self.partial_start = list(message.words), message.start
            self.partial_text = message.text
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
    them. Words whose written form cannot be matched letter for letter (a
    phrase the server wrote otherwise, "NYC" or "$25" with a lexicon or ``itn``,
    or a server that renders otherwise) keep their normalized ``w``; the words
    after them are matched again from the next token that spells them.
    """
    words = [w.w for w in message.words]
    cores = [token.rstrip(",.?") for token in message.text.split()]
    out: list[str] = []
    k = t = 0
    while k < len(words):
        spelled = spelled_pieces(cores[t], words, k) if t < len(cores) else None
        if spelled is not None:
            out.extend(spelled)
            k, t = k + len(spelled), t + 1
            continue
        k2, t2 = _resync(cores, words, k, t)
        out.extend(words[k:k2])
        k, t = k2, t2
    return out


#: How far :func:`written_forms` looks, in words and in tokens, for where a phrase written
#: otherwise ends.
_RESYNC_SPAN = 16


def _resync(cores: list[str], words: list[str], k: int, t: int) -> tuple[int, int]:
    """The nearest ``(word, token)`` after a mismatch at ``(k, t)`` from which a token spells
    the words again: fewest words and tokens skipped, and of those, more words than tokens (a
    written form is shorter than its words: "25" for "twenty five"); ``(len(words), len(cores))``
    if none is within :data:`_RESYNC_SPAN`."""
    for cost in range(1, 2 * _RESYNC_SPAN + 1):
        for skipped in range(min(cost, _RESYNC_SPAN), 0, -1):  # words skipped; the rest are tokens
            k2, t2 = k + skipped, t + cost - skipped
            if cost - skipped <= _RESYNC_SPAN and k2 < len(words) and t2 < len(cores) and (
                    spelled_pieces(cores[t2], words, k2) is not None):
                return k2, t2
    return len(words), len(cores)


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

        if not self.words:  # stopped before any final came: nothing to measure
            return "0 words: no final came, no latency measured"
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
        """When each word sent so far became decidable (:func:`streampunct.core.latency.decidable_times`)."""
        times = decidable_times(self.sent_at, self.options.right_context, self.options.max_delay_ms,
                                list(zip(self._flush_upto, self._flush_at, strict=True)))
        return times.tolist()

    def summary(self) -> LatencySummary:
        n = min(len(self.final_at), len(self.sent_at))
        latency = [self.final_at[i] - self.sent_at[i] for i in range(n)]
        decidable = self.decidable()
        margin = [self.final_at[i] - decidable[i] for i in range(n)]
        return LatencySummary(n, _percentiles(latency), _percentiles(margin))


# -- connecting, and streams that outlive their connections ---------------------


def message_words(words: Sequence[Word], limits: Limits = DEFAULT_LIMITS,
                  message: type[WordsMessage | HypothesisMessage] = WordsMessage) -> list[tuple[Word, ...]]:
    """Committed words as the messages (``message``) that carry them: at most ``limits.max_words_per_message``
    words each, every word cut to ``limits.max_word_chars`` characters, and each frame at most
    ``limits.max_message_bytes`` bytes when the server announces it (a word too large alone
    goes alone)."""
    n, chars = limits.max_words_per_message, limits.max_word_chars
    cut = tuple(w if len(w.w) <= chars else Word(w.w[:chars], w.start, w.end) for w in words)
    budget = limits.max_message_bytes
    if budget is None:
        return [cut[i : i + n] for i in range(0, len(cut), n)]
    base = _frame_bytes(message(()))  # the frame of no words; each word adds its JSON and a comma
    out: list[tuple[Word, ...]] = []
    chunk: list[Word] = []
    size = base
    for word in cut:
        item = _frame_bytes(message((word,))) - base
        if chunk and (len(chunk) == n or size + 1 + item > budget):
            out.append(tuple(chunk))
            chunk, size = [], base
        size += item + (1 if chunk else 0)
        chunk.append(word)
    if chunk:
        out.append(tuple(chunk))
    return out


def _frame_bytes(message: WordsMessage | HypothesisMessage | ResumeRequest) -> int:
    """The size of ``message``'s frame as sent (UTF-8 bytes), what ``max_message_bytes`` bounds."""
    frame = encode_frame(message)
    return len(frame) if isinstance(frame, bytes) else len(frame.encode())


class ConnectError(ClientError):
    """A connection attempt failed; ``retryable`` is False where trying again cannot help
    (a wrong token, path or URL)."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


#: What a refused handshake means, by HTTP status.
REFUSALS = {
    401: "missing or wrong token (pass --token or set $STREAMPUNCT_AUTH_TOKEN)",
    404: "no streaming endpoint at this path (the server listens on /v1/stream)",
    503: "the server is not serving now (loading, stopping, or at its session limit)",
}


def close_code(closed: ConnectionClosed) -> tuple[int, str]:
    """The close code and reason the peer sent (1006 and "" when the connection dropped
    without a close frame)."""
    frame = closed.rcvd
    return (frame.code, frame.reason) if frame is not None else (1006, "")


def check_url(url: str) -> None:
    """Refuse ``url`` unless it is a WebSocket URL: scheme ``ws`` or ``wss``, a host, and a port (when
    given) that is a number in 0..65535; a non-retryable :class:`ConnectError` otherwise. (websockets
    lets urllib's bare ValueError out for a bad port or a broken IPv6 host.)"""
    why = ""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- ValueError: not a number, or out of range
        if parts.scheme in ("ws", "wss") and parts.hostname:
            return
    except ValueError as e:  # "Port out of range 0-65535", "Invalid IPv6 URL", ...
        why = f": {e}"
    raise ConnectError(f"{url!r} is not a WebSocket URL{why} (expected ws://HOST:PORT/v1/stream)",
                       retryable=False)


async def open_client(url: str, **options) -> StreamClient:
    """:meth:`StreamClient.connect` with every failure turned into a one-line :class:`ConnectError`;
    a malformed URL (:func:`check_url`) is refused before any connection is tried."""
    check_url(url)
    try:
        return await StreamClient.connect(url, **options)
    except InvalidURI:
        raise ConnectError(f"{url!r} is not a WebSocket URL (expected ws://HOST:PORT/v1/stream)",
                           retryable=False) from None
    except InvalidStatus as e:
        status = e.response.status_code
        reason = REFUSALS.get(status, "unexpected answer")
        raise ConnectError(f"the server refused the connection: HTTP {status}: {reason}",
                           retryable=status not in (401, 403, 404)) from None
    except ConnectionClosed as e:
        raise ConnectError(f"the server closed the connection at once (close code {close_code(e)[0]})") from None
    except (OSError, TimeoutError, InvalidHandshake) as e:
        hint = ("; is the server serving TLS? (ws:// for one that is not)"
                if url.startswith("wss:") and isinstance(e, (ConnectionResetError, ssl.SSLError))
                else "; is a server running there? (streampunct serve)" if isinstance(e, ConnectionRefusedError)
                else "")
        raise ConnectError(f"cannot connect to {url}: {str(e) or type(e).__name__}{hint}") from None


#: Close codes after which a :class:`ResumableStream` resumes: 1001 (the server goes away),
#: 1011 (internal error), 1012 (restart: ``serve --drain resume``), 1013 (try again later),
#: and 1006 (the connection dropped without a close frame).
RESUME_CLOSE_CODES = frozenset({1001, 1006, 1011, 1012, 1013})

#: Final words a :class:`ResumableStream` keeps for a resume's context.
CONTEXT_KEEP = 256
#: Context words sent to a server that does not announce ``max_context_words``.
DEFAULT_CONTEXT_WORDS = 64


@dataclass(frozen=True)
class Reconnect:
    """How a :class:`ResumableStream` reconnects after losing its connection.

    Attributes:
        attempts: connection attempts before giving up (0: never resume). The
            count starts again once a final arrives after a resume, so a server
            that accepts the resume and fails again before finalizing anything
            cannot hold the client in a loop.
        initial_delay_s: the wait before the first attempt; each further
            attempt waits twice as long, up to ``max_delay_s``. Every wait is
            drawn between its half and its whole, so that the streams of a
            drained server do not all come back at the same instant.
        max_delay_s: the longest wait.
    """

    attempts: int = 10
    initial_delay_s: float = 0.25
    max_delay_s: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 0:
            raise ValueError("attempts must be >= 0")
        if self.initial_delay_s < 0 or self.max_delay_s < self.initial_delay_s:
            raise ValueError("delays must satisfy 0 <= initial_delay_s <= max_delay_s")

    def delay(self, attempt: int, rng: random.Random) -> float:
        """The wait before attempt ``attempt`` (1-based)."""
        whole = min(self.max_delay_s, self.initial_delay_s * 2.0 ** min(attempt - 1, 60))
        return rng.uniform(whole / 2, whole)


@dataclass(frozen=True)
class ResumeNotice:
    """What happened when a stream lost its connection (:meth:`format`: one line).

    Attributes:
        code, reason: how the connection closed (1006: it dropped without a close frame).
        start: the word index the stream resumed at; None: it could not resume.
        resent: words sent again (every word without a final).
        attempts: connection attempts made.
        seconds: from the loss to the resume (or to giving up).
        url: where it resumed.
        error: why it could not resume (the last attempt's failure).

    A connection the client cut because the server went silent while it owed finals
    (``silence_timeout_s``) has code 1006 (no close frame) and says so in ``reason``.
    """

    code: int
    reason: str
    start: int | None
    resent: int
    attempts: int
    seconds: float
    url: str
    error: str = ""

    def format(self) -> str:
        if self.code == 1006:
            what = self.reason or "the connection dropped"
        else:
            what = f"close code {self.code}" + (f": {self.reason}" if self.reason else "")
        head = f"connection lost ({what})"
        if self.start is None:
            return f"{head}; could not resume ({self.attempts} attempts in {self.seconds:.1f} s): {self.error}"
        return (f"{head}; resumed at word {self.start} on {self.url} after {self.attempts} "
                f"attempt{'s' if self.attempts != 1 else ''} in {self.seconds:.1f} s, "
                f"{self.resent} words sent again")


class ResumeFailed(ClientError):
    """The connection was lost and the stream could not be resumed; ``notice`` says why."""

    def __init__(self, notice: ResumeNotice) -> None:
        super().__init__(notice.format())
        self.notice = notice


class ResumableStream:
    """One stream over as many connections as it takes (protocol "Resuming a stream").

    ::

        stream = await ResumableStream.connect(url, right_context=2, on_notice=print)
        async def send():
            await stream.send_words(["hello", "world"])
            await stream.end()
        sender = asyncio.create_task(send())
        async for message in stream:      # final, partial, flushed, error, resumed, end
            ...

    Words are sent normalized (:func:`~streampunct.text.normalize.sending_form`: empty
    ones dropped, the symbols the server writes back in ``text`` kept: ``$1,000``), so
    that the client counts word indices as the server does, and kept until their final
    arrives. Iterate the messages while sending:
    the iteration notices a lost connection (a drop, or a close with a code of
    :data:`RESUME_CLOSE_CODES`), reconnects with backoff (:class:`Reconnect`),
    sends ``resume`` with the last final words as context and the session's
    options, then sends again every word without a final, the ``flush``
    messages not yet answered, the current hypothesis and ``end`` if it was
    sent; sends made meanwhile wait in the same record. Each interruption
    gives one :class:`ResumeNotice` (``on_notice``); the iteration yields the
    new connection's ``resumed`` and goes on, and raises :class:`ResumeFailed`
    when the stream cannot be resumed. It ends after the server's ``end``, or
    when a connection closes otherwise (:attr:`close_code`).

    A server that refused a message (``error`` ``bad_request`` or
    ``too_large``) may have numbered words otherwise than the client: such a
    stream is not resumed (its notice says so).

    A server that hangs without closing its socket (a stopped process, a frozen
    VM, a host cut off without a reset) sends nothing more, and the stream sets
    no ping timeout (:meth:`StreamClient.connect` says why). So the stream takes
    the connection for lost, cuts it (:meth:`StreamClient.abort`) and resumes
    as after a drop, when both hold for ``silence_timeout_s`` seconds
    (default :data:`SILENCE_TIMEOUT_S`; None or 0: never): the server owes
    something, a final for a word the latency contract made decidable (as the
    client counts: ``right_context`` more words sent after it, ``max_delay_ms``
    since it was sent, or a ``flush`` or ``end`` after it), an answer to a
    ``flush``, or the ``end``; and no frame at all has come from the server.
    A server that is slow but alive still sends something meanwhile: the finals
    of earlier words, partials. One that reads the client slowly (its backlog
    full) is finalizing the words it has, and sends their finals; only an engine
    call longer than the timeout would look silent. A client that owes nothing
    (every final in) is never cut, however long it pauses. The notice has code
    1006, and ``reason`` says that the server was silent.
    """

    def __init__(self, client: StreamClient, url: str, connect_options: dict, reconnect: Reconnect,
                 on_notice: Callable[[ResumeNotice], None] | None = None, seed: int | None = None,
                 silence_timeout_s: float | None = SILENCE_TIMEOUT_S) -> None:
        if silence_timeout_s is not None and not silence_timeout_s >= 0:
            raise ValueError("silence_timeout_s must be >= 0 (or None)")
        self._client = client
        self.url = url
        self._connect_options = connect_options
        self.reconnect = reconnect
        self._on_notice = on_notice
        self._rng = random.Random(seed)
        #: the session options (those of the first connection, carried by every resume)
        self.options: SessionOptions = client.options
        self.n_final = 0
        self._pending: deque[Word] = deque()  # sent, without a final; the first has index n_final
        self._context: deque[PunctuatedWord] = deque(maxlen=CONTEXT_KEEP)
        self._held = 0  # the last final's ``held``
        self._flushes: deque[int] = deque()  # words sent before each unanswered flush
        self._hypothesis: tuple[Word, ...] = ()
        self._hypothesis_version = 0
        self._end_sent = False
        self._ended = False
        self._closing = False
        self._live = True  # sends go out now (False while resuming)
        self._untracked = ""  # why word indices are no longer known (a refused message)
        self._attempts = 0  # connection attempts since the stream last moved on
        self._progress = True  # a final arrived since the last resume
        self._connected_at = -math.inf  # when the current connection was resumed (the first: long ago)
        self._failure: ResumeNotice | None = None
        self._close: tuple[int, str] | None = None
        self._sent_while_closed = asyncio.Event()  # a send (or close) after an idle close
        #: seconds of silence from a server that owes finals before the connection is cut (0: never)
        self.silence_timeout_s = silence_timeout_s or 0.0
        self._loop = asyncio.get_running_loop()
        self._sent_at: deque[float] = deque()  # when each word of ``_pending`` was sent
        self._flush_at: deque[float] = deque()  # when each unanswered flush was sent
        self._end_at = math.inf  # when ``end`` was sent
        self._heard_at = self._loop.time()  # when the last frame came (or the connection was resumed)
        self._waiting: asyncio.Timeout | None = None  # the iteration's wait for a frame
        #: every interruption, in order
        self.notices: list[ResumeNotice] = []

    @classmethod
    async def connect(
        cls, url: str, *, token: str | None = None, reconnect: Reconnect | None = None,
        on_notice: Callable[[ResumeNotice], None] | None = None, open_timeout: float = 10.0,
        max_size: int | None = 1 << 24, ping_timeout: float | None = None, seed: int | None = None,
        right_context: int | None = None, max_delay_ms: int | None = None, partials: bool | None = None,
        capitalize: bool | None = None, itn: bool | None = None,
        lexicon: Sequence[tuple[str, str]] | None = None, on_message: MessageTap | None = None,
        silence_timeout_s: float | None = SILENCE_TIMEOUT_S,
    ) -> ResumableStream:
        """Open the stream's first connection (failures raise :class:`ConnectError`); options as
        :meth:`StreamClient.connect` (``on_message`` sees the messages of every connection:
        ``resume``, the words sent again and ``resumed`` too). ``silence_timeout_s``: see the
        class (a negative value raises ``ValueError`` before connecting)."""
        if silence_timeout_s is not None and not silence_timeout_s >= 0:
            raise ValueError("silence_timeout_s must be >= 0 (or None)")
        connect_options = {"token": token, "open_timeout": open_timeout, "max_size": max_size,
                           "ping_timeout": ping_timeout, "on_message": on_message}
        client = await open_client(url, right_context=right_context, max_delay_ms=max_delay_ms,
                                   partials=partials, capitalize=capitalize, itn=itn, lexicon=lexicon,
                                   **connect_options)
        return cls(client, url, connect_options, reconnect or Reconnect(), on_notice, seed, silence_timeout_s)

    # -- what the stream holds -----------------------------------------------
    @property
    def ready(self) -> Ready:
        """The current connection's ``ready``."""
        return self._client.ready

    @property
    def limits(self) -> Limits:
        """The current server's message limits (the defaults when it announces none)."""
        return self._client.ready.limits or DEFAULT_LIMITS

    @property
    def n_sent(self) -> int:
        """Words sent so far (the index the next word takes)."""
        return self.n_final + len(self._pending)

    @property
    def pending(self) -> tuple[Word, ...]:
        """Words sent and without a final, oldest first."""
        return tuple(self._pending)

    @property
    def close_code(self) -> int | None:
        """How the last connection closed (None while it is open)."""
        if self._close is not None:
            return self._close[0]
        return self._client.close_code

    @property
    def close_reason(self) -> str | None:
        """The reason the server gave when the last connection closed (None while it is open)."""
        if self._close is not None:
            return self._close[1]
        return self._client.close_reason

    # -- sending ---------------------------------------------------------------
    def _check_open(self) -> None:
        if self._failure is not None:
            raise ResumeFailed(self._failure)
        if self._closing or self._ended:
            raise ClientError("the stream is closed")

    async def _send(self, client: StreamClient, message) -> bool:
        """Send on ``client`` if it is still the live connection; False when it is not (the
        message is in the record, and the resume sends it again)."""
        if not self._live or self._client is not client:
            self._sent_while_closed.set()
            return False
        try:
            await client.send(message)
        except ConnectionClosed:
            return False
        return True

    async def send_words(self, words: Sequence[str | Word]) -> list[Word]:
        """Send committed words; returns them as sent (normalized with their symbols, empty ones
        dropped), in order: they take the indices ``n_sent``, ``n_sent + 1``, ... A word made
        only of symbols ("&", an emoji) is sent too, where it stood, for the server's ``text``
        to show, but takes no index and is not returned (nor sent again after a resume)."""
        self._check_open()
        client, limits = self._client, self.limits
        out, sending = [], []
        for item in words:
            word = item if isinstance(item, Word) else Word(item)
            w = sending_form(word.w[: limits.max_word_chars])
            if w:
                out.append(Word(w, word.start, word.end))
                sending.append(out[-1])
            elif symbols := symbol_word(word.w[: limits.max_word_chars]):
                sending.append(Word(symbols, word.start, word.end))
        self._pending.extend(out)
        self._sent_at.extend(itertools.repeat(self._loop.time(), len(out)))
        self._hypothesis = ()  # every words message clears it
        self._rearm()
        for chunk in message_words(sending, limits) or [()]:
            if not await self._send(client, WordsMessage(chunk)):
                break
        return out

    async def send_hypothesis(self, words: Sequence[str | Word]) -> None:
        """Replace the interim hypothesis (an empty list clears it)."""
        self._check_open()
        chunks = message_words([w if isinstance(w, Word) else Word(w) for w in words], self.limits,
                               HypothesisMessage)
        self._hypothesis = chunks[0] if chunks else ()
        self._hypothesis_version += 1
        await self._send(self._client, HypothesisMessage(self._hypothesis))

    async def flush(self) -> None:
        self._check_open()
        self._flushes.append(self.n_sent)
        self._flush_at.append(self._loop.time())
        self._rearm()
        await self._send(self._client, FlushRequest())

    async def end(self) -> None:
        """End the stream: every word sent is finalized, then the server's ``end`` comes."""
        self._check_open()
        self._end_sent = True
        self._end_at = self._loop.time()
        self._rearm()
        await self._send(self._client, EndRequest())

    async def close(self) -> None:
        """Close the connection (ending the iteration); the stream is not resumed after this."""
        self._closing = True
        self._sent_while_closed.set()
        await self._client.close()

    def abort(self) -> None:
        """Drop the connection now, without the closing handshake (:meth:`StreamClient.abort`);
        the stream is not resumed after this, and its :meth:`close` returns at once."""
        self._closing = True
        self._sent_while_closed.set()
        self._client.abort()

    async def __aenter__(self) -> ResumableStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- receiving ---------------------------------------------------------------
    async def __aiter__(self) -> AsyncIterator[ServerMessage]:
        while not self._ended:
            try:
                frame = await self._next_frame()
            except ConnectionClosed as e:
                self._close = close_code(e)
                if self._closing or self._close[0] not in RESUME_CLOSE_CODES or not self.reconnect.attempts:
                    return
                if self._close == (1001, IDLE_TIMEOUT_REASON) and not self._owes():
                    # closed for sending nothing, and owed nothing: come back when there is something
                    # to send (a resume now would only be closed again), as a stream that moved on
                    self._live = False
                    self._sent_while_closed.clear()
                    await self._sent_while_closed.wait()
                    if self._closing:
                        return
                    self._progress = True
                yield await self._resume()
                continue
            if frame is None:  # the server went silent while it owed finals: as a drop
                silent = self._loop.time() - self._heard_at
                logger.info("no message from the server in %.1f s while it owed finals: "
                            "cutting the connection", silent)
                self._client.abort()
                self._close = (1006, f"no message from the server in {silent:.0f} s while it owed finals")
                if self._closing or not self.reconnect.attempts:
                    return
                yield await self._resume()
                continue
            message = self._client.received(frame)
            if isinstance(message, Extension):  # a newer server's message type: skipped
                continue
            self._track(message)
            yield message

    def _track(self, message: ServerMessage) -> None:
        """Fold a server message into what the stream holds."""
        if isinstance(message, Final):
            self._progress = True
            words = message.words
            pending = list(itertools.islice(self._pending, len(words)))
            if not self._untracked and (
                    message.start != self.n_final or [w.w for w in words] != [normalize_word(w.w) for w in pending]):
                self._untracked = (f"the server's final for words {message.start}.. does not match the "
                                   f"words sent from {self.n_final} on")
            self.n_final = message.start + len(words)
            for _ in range(min(len(words), len(self._pending))):
                self._pending.popleft()
                self._sent_at.popleft()
            self._context.extend(PunctuatedWord(w.w, w.p) for w in words)
            self._held = message.held  # final words no text wrote yet (a resume passes them on)
        elif isinstance(message, Flushed):
            if self._flushes:
                self._flushes.popleft()
                self._flush_at.popleft()
        elif isinstance(message, Ended):
            self._ended = True
        elif isinstance(message, Error) and message.code in (ErrorCode.BAD_REQUEST, ErrorCode.TOO_LARGE) \
                and not self._untracked:  # the errors that refuse a message
            self._untracked = f"the server refused a message ({message.code}: {message.message})"

    async def _next_frame(self) -> str | bytes | None:
        """The current connection's next frame; None once the server has been silent while it owed
        something for ``silence_timeout_s`` (:meth:`_silence_deadline`). Frames that came while
        nothing iterated are taken first, those still in the socket too (a consumer, or the whole
        process, that was busy or stopped past the deadline): only a wait with none to take
        counts as silence."""
        connection = self._client.connection
        while True:
            deadline = self._silence_deadline()
            try:
                # (a deadline already past still takes a frame that is there: it waits for none)
                async with asyncio.timeout_at(deadline) as self._waiting:
                    frame = await connection.recv()
            except TimeoutError:
                deadline = self._silence_deadline()
                if deadline is None or deadline - self._loop.time() > 1e-3:
                    continue  # the deadline moved (a final, a send): wait again
                try:  # a last look, after the loop read the socket once more: none there, silent
                    async with asyncio.timeout(0):
                        frame = await connection.recv()
                except TimeoutError:
                    return None
            finally:
                self._waiting = None
            self._heard_at = self._loop.time()
            return frame

    def _silence_deadline(self) -> float | None:
        """When the connection is to be taken for lost if no frame comes before: ``silence_timeout_s``
        after both the last frame and the moment the server first owed what it still owes (the
        oldest word without a final became decidable as the client counts it, or the oldest
        unanswered ``flush`` or the ``end`` was sent; for a resumed connection, not before it took
        the words sent again). None: the server owes nothing now (or the timeout is off)."""
        if not self.silence_timeout_s:
            return None
        due = min(self._flush_at[0] if self._flush_at else math.inf,
                  self._end_at if not self._ended else math.inf)
        if self._sent_at:
            options = self._client.options
            due = min(due, self._sent_at[0] + options.max_delay_ms / 1000.0)
            if len(self._sent_at) > options.right_context:
                due = min(due, self._sent_at[options.right_context])
        if due == math.inf:
            return None
        return max(due, self._heard_at) + self.silence_timeout_s

    def _rearm(self) -> None:
        """A send may make the server owe something sooner: bring the iteration's wait forward."""
        waiting = self._waiting
        if waiting is None or waiting.expired():
            return
        deadline = self._silence_deadline()
        if deadline is not None and (waiting.when() is None or deadline < waiting.when()):
            waiting.reschedule(deadline)

    async def _resume(self) -> Resumed:
        """Reconnect with backoff and resume; raises :class:`ResumeFailed`."""
        loop = asyncio.get_running_loop()
        self._live = False
        code, reason = self._close or (1006, "")
        began = loop.time()
        stable = loop.time() - self._connected_at >= STABLE_CONNECTION_S
        if self._progress or (stable and not self._owes()):
            # attempts count from the last time the stream moved on: a final, or (owing nothing) a
            # connection that lasted; connections closed at once (a server failing on the resent
            # hypothesis, or closing every stream) keep counting, so the attempt limit ends them
            self._attempts = 0
        self._progress = False
        attempts = 0
        error = f"cannot resume: {self._untracked}" if self._untracked else ""
        last = "the stream lost its connection again before any word was finalized"
        while not error and self._attempts < self.reconnect.attempts:
            self._attempts += 1
            attempts += 1
            await asyncio.sleep(self.reconnect.delay(self._attempts, self._rng))
            if self._closing:
                error = "the stream was closed"
                break
            try:
                client = await open_client(self.url, **self._connect_options)
            except ConnectError as e:
                error = "" if e.retryable else str(e)
                last = str(e)
                continue
            try:
                resumed = await self._start(client)
            except (ConnectionClosed, TimeoutError) as e:
                last = f"the new connection failed: {e or type(e).__name__}"
                await client.close()
                continue
            except ClientError as e:
                error = str(e)
                await client.close()
                break
            self._client = client
            self._close = None
            self._connected_at = self._heard_at = loop.time()
            resent = await self._replay(client)
            self._notify(ResumeNotice(code, reason, resumed.start, resent, attempts, loop.time() - began, self.url))
            return resumed
        else:
            error = error or last
        notice = ResumeNotice(code, reason, None, 0, attempts, loop.time() - began, self.url, error)
        self._failure = notice
        self._notify(notice)
        raise ResumeFailed(notice)

    def _owes(self) -> bool:
        """The stream waits for the server: words without a final, a flush or the end unanswered."""
        return bool(self._pending or self._flushes or (self._end_sent and not self._ended))

    def _notify(self, notice: ResumeNotice) -> None:
        self.notices.append(notice)
        if self._on_notice is not None:
            self._on_notice(notice)

    async def _start(self, client: StreamClient) -> Resumed:
        """Send ``resume`` on a new connection and take its answer."""
        limits = client.ready.limits or DEFAULT_LIMITS
        wanted = DEFAULT_CONTEXT_WORDS if limits.max_context_words is None else limits.max_context_words
        # the words the last final left held (written forms) go too: the new connection writes them
        # (``held`` is sent even when 0: a resume without it has the server infer them)
        n = min(max(wanted, self._held), limits.max_words_per_message, len(self._context), self.n_final)
        context = tuple(itertools.islice(self._context, len(self._context) - n, None)) if n > 0 else ()
        config = decode_config(self.options.to_json())  # the session's options, validated as a config
        request = ResumeRequest(self.n_final, context, config, min(self._held, len(context)))
        if limits.max_message_bytes is not None:  # the oldest context words go first
            while request.context and _frame_bytes(request) > limits.max_message_bytes:
                request = ResumeRequest(self.n_final, request.context[1:], config,
                                        min(request.held or 0, len(request.context) - 1))
        await client.send(request)
        reply = await client.recv(timeout=self._connect_options["open_timeout"])
        if isinstance(reply, Error):
            raise ClientError(f"the server refused the resume: {reply.code}: {reply.message}")
        if not isinstance(reply, Resumed) or reply.start != self.n_final:
            raise ClientError(f"expected 'resumed' at word {self.n_final}, got {reply.to_json()}")
        if self.options.itn and not reply.config.itn:  # as at the first connection: not silently dropped
            raise ClientError(f"{ITN_UNAVAILABLE} (the server resumed without itn)")
        client.options = reply.config
        return reply

    async def _replay(self, client: StreamClient) -> int:
        """Send again, in order, what the server has not acted on: the words without a final
        (each unanswered ``flush`` after the words it followed), the hypothesis, ``end``.
        Sends made meanwhile join the record and go out here too; then sending is live."""
        start = self.n_final  # no final arrives while this runs: nothing reads the connection
        limits = client.ready.limits or DEFAULT_LIMITS
        words = flushes = 0
        hypothesis_version = -1
        end_sent = False
        try:
            while True:
                upto = len(self._pending)
                if flushes < len(self._flushes):
                    upto = min(upto, max(0, self._flushes[flushes] - start))
                if words < upto:
                    n = min(upto - words, limits.max_words_per_message)
                    chunk = message_words(tuple(itertools.islice(self._pending, words, words + n)), limits)[0]
                    await client.send(WordsMessage(chunk))
                    words += len(chunk)
                elif flushes < len(self._flushes):
                    flushes += 1
                    await client.send(FlushRequest())
                elif self._hypothesis and hypothesis_version != self._hypothesis_version:
                    hypothesis_version = self._hypothesis_version
                    await client.send(HypothesisMessage(self._hypothesis))
                elif self._end_sent and not end_sent:
                    end_sent = True
                    await client.send(EndRequest())
                else:
                    break
        except ConnectionClosed:
            pass  # the iteration notices and resumes again
        self._live = True
        return len(self._pending)
