"""Live captioning against a streaming server: the logic behind ``streampunct caption``.

ASR events (:mod:`streampunct.caption_input`: a paced plain-text transcript,
or JSON lines from a recognizer, with timestamps and interim hypotheses) are
streamed to the server: committed words as ``words``, interim ones as
``hypothesis``. Captions are shown as they come: each completed sentence on
its own line, and on a terminal a status line with the sentence in progress
and the provisional tail dimmed; or written as subtitles
(:mod:`streampunct.subtitles`). The final punctuated transcript and the
latency figures the client saw are returned. Whatever happens to the
connection, everything received is kept (:class:`StreamClosedEarly` carries
it).

Nothing is sent that the server must refuse for its size: committed words go
in messages of at most the server's ``max_words_per_message`` words, and
longer words are cut to its ``max_word_chars`` characters (the server keeps
far fewer after normalization anyway). The limits come with ``ready``; a
server that does not send them is taken to have the defaults
(:data:`MAX_WORDS_PER_MESSAGE`, :data:`MAX_WORD_CHARS`). An ``error`` the
server answers with all the same (other than ``overloaded``, after which it
keeps the words) is kept in the transcript and, with ``errors``, reported as
it comes: the words of a refused message are lost.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from collections.abc import AsyncIterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from streampunct.caption_input import AsrEvent, text_events
from streampunct.client import ClientError, LatencySummary, LatencyTracker, StreamClient, Transcript
from streampunct.errors import InputError
from streampunct.labels import ID_TO_MARK, LABELS, PERIOD, QUESTION
from streampunct.protocol import (
    DEFAULT_LIMITS,
    Error,
    ErrorCode,
    Final,
    Limits,
    SessionOptions,
    Word,
)
from streampunct.subtitles import SubtitleWriter, TimedWord
from streampunct.text import render
from streampunct.textfile import read_text

_DIM, _RESET, _CLEAR_LINE = "\x1b[2m", "\x1b[0m", "\r\x1b[K"

#: Most words the client puts in one message: the server's default ``--max-words-per-message``.
MAX_WORDS_PER_MESSAGE = DEFAULT_LIMITS.max_words_per_message
#: Longer words are cut to this many characters (the server refuses longer ones).
MAX_WORD_CHARS = DEFAULT_LIMITS.max_word_chars


def message_words(words: Sequence[Word], limits: Limits = DEFAULT_LIMITS) -> list[tuple[Word, ...]]:
    """Committed words as the messages that carry them: at most ``limits.max_words_per_message``
    words each, every word cut to ``limits.max_word_chars`` characters."""
    n, chars = limits.max_words_per_message, limits.max_word_chars
    cut = tuple(w if len(w.w) <= chars else Word(w.w[:chars], w.start, w.end) for w in words)
    return [cut[i : i + n] for i in range(0, len(cut), n)]


def _loses_words(error: Error) -> bool:
    """Every ``error`` but ``overloaded`` (after which the server keeps the words) refused a message."""
    return error.code != ErrorCode.OVERLOADED


def lost_words_errors(transcript: Transcript) -> list[Error]:
    """The server's ``error`` messages that refused words (:func:`_loses_words`)."""
    return [e for e in transcript.errors if _loses_words(e)]


def read_transcript(path: str | Path) -> list[str]:
    """Words of a transcript: plain text, or ``word<TAB>LABEL`` lines (labels dropped)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"no such transcript file: {path}")
    lines = read_text(path).splitlines()  # refuses a directory
    filled = [line for line in lines if line.strip()]
    if filled and all(line.rpartition("\t")[2].strip() in LABELS for line in filled):
        from streampunct.data import read_word_labels

        return read_word_labels(path).words
    return " ".join(lines).split()


def asr_chunks(
    words: Sequence[str], *, wps: float, max_chunk: int = 4, seed: int = 0
) -> list[tuple[float, list[str]]]:
    """Split words into chunks of 1..max_chunk with the time (s) each is committed.

    Word ``i`` is spoken at ``i / wps``; a chunk is sent when its last word
    has been spoken, as a recognizer commits words in small groups.
    """
    if wps <= 0:
        raise InputError("--wps must be positive")
    if max_chunk < 1:
        raise InputError("--max-chunk must be at least 1")
    rng = random.Random(seed)
    chunks = []
    i = 0
    while i < len(words):
        n = rng.randint(1, max_chunk)
        chunk = list(words[i : i + n])
        i += len(chunk)
        chunks.append((i / wps, chunk))
    return chunks


class CaptionView:
    """Renders captions: complete sentences as lines, the sentence in progress live.

    With ``live`` (a terminal), a status line shows the final words of the
    current sentence followed by the dimmed provisional tail, rewritten in
    place; without it, only complete lines are printed.
    """

    def __init__(self, out: TextIO, *, live: bool, width: int = 100, capitalize: bool = True) -> None:
        self.out = out
        self.live = live
        self.width = max(20, width)
        self.capitalize = capitalize
        self._printed = 0  # final words already printed as complete sentences

    def _render(self, transcript: Transcript, start: int, end: int) -> str:
        return render(
            (transcript.written if self.capitalize else transcript.words)[start:end], transcript.labels[start:end],
            capitalize=self.capitalize, sentence_start=True,
        )

    def update(self, transcript: Transcript) -> None:
        labels = transcript.labels
        end = None
        for i in range(transcript.n_final - 1, self._printed - 1, -1):
            if labels[i] in (PERIOD, QUESTION):
                end = i + 1
                break
        if end is not None:
            self.out.write((_CLEAR_LINE if self.live else "") + self._render(transcript, self._printed, end) + "\n")
            self._printed = end
        if self.live:
            current = self._render(transcript, self._printed, transcript.n_final)
            tail = " ".join(w.w + w.p for w in transcript.tail)
            current, tail = _fit(current, tail, self.width - 1)
            gap = " " if current and tail else ""
            self.out.write(f"{_CLEAR_LINE}{current}{gap}{_DIM}{tail}{_RESET}")
        self.out.flush()

    def close(self, transcript: Transcript) -> None:
        rest = self._render(transcript, self._printed, transcript.n_final)
        self.out.write((_CLEAR_LINE if self.live else "") + (rest + "\n" if rest else ""))
        self._printed = transcript.n_final
        self.out.flush()


def _fit(current: str, tail: str, width: int) -> tuple[str, str]:
    """Keep the end of ``current + " " + tail`` within ``width`` characters."""
    over = len(current) + 1 + len(tail) - width
    if over <= 0:
        return current, tail
    if over < len(current):
        return "\u2026" + current[over + 1 :], tail
    return "", "\u2026" + tail[max(0, len(tail) - width + 1) :]


@dataclass(frozen=True)
class CaptionResult:
    """What a captioning run produced.

    Attributes:
        transcript: final words and labels.
        latency: latency figures seen by the client.
        options: the session options the server confirmed.
    """

    transcript: Transcript
    latency: LatencySummary
    options: SessionOptions


class StreamClosedEarly(ClientError):
    """The server closed the stream before its ``end`` (shutdown, error); ``result`` has what came."""

    def __init__(self, message: str, result: CaptionResult) -> None:
        super().__init__(message)
        self.result = result


#: What a refused handshake means, by HTTP status.
_REFUSALS = {
    401: "missing or wrong token (pass --token or set $STREAMPUNCT_AUTH_TOKEN)",
    404: "no streaming endpoint at this path (the server listens on /v1/stream)",
    503: "the server is not serving now (loading, stopping, or at its session limit)",
}


async def connect(url: str, **options) -> StreamClient:
    """:meth:`StreamClient.connect` with every failure turned into a one-line :class:`ClientError`."""
    try:
        return await StreamClient.connect(url, **options)
    except InvalidURI:
        raise ClientError(f"{url!r} is not a WebSocket URL (expected ws://HOST:PORT/v1/stream)") from None
    except InvalidStatus as e:
        status = e.response.status_code
        reason = _REFUSALS.get(status, "unexpected answer")
        raise ClientError(f"the server refused the connection: HTTP {status}: {reason}") from None
    except ConnectionClosed as e:
        raise ClientError(f"the server closed the connection at once (close code {e.code})") from None
    except (OSError, TimeoutError, InvalidHandshake) as e:
        raise ClientError(f"cannot connect to {url}: {e or type(e).__name__}") from None


def _word_times(word, arrival: float) -> tuple[float, float]:
    start = word.start if word.start is not None else word.end
    end = word.end if word.end is not None else word.start
    if start is None or end is None:
        return arrival, arrival
    return float(start), float(end)


async def caption(
    url: str,
    words: Sequence[str] | None = None,
    *,
    events: Sequence[AsrEvent] | AsyncIterable[AsrEvent] | None = None,
    wps: float = 2.5,
    max_chunk: int = 4,
    seed: int = 0,
    token: str | None = None,
    right_context: int | None = None,
    max_delay_ms: int | None = None,
    partials: bool | None = True,
    capitalize: bool | None = True,
    view: CaptionView | None = None,
    json_log: TextIO | None = None,
    subtitles: SubtitleWriter | None = None,
    errors: TextIO | None = None,
) -> CaptionResult:
    """Stream ASR ``events`` (or plain ``words`` paced at ``wps``) to the server and collect the captions.

    Every ``error`` the server answers with, but ``overloaded``, is written to
    ``errors`` as it comes (``server error CODE: MESSAGE``); all are kept in
    the transcript (:func:`lost_words_errors`).

    Raises :class:`StreamClosedEarly` (after closing the view and the
    subtitles, so nothing received is lost) when the server closes the
    stream before its ``end``.
    """
    if events is None:
        if words is None:
            raise ValueError("caption() needs words or events")
        events = text_events(words, wps=wps, max_chunk=max_chunk, seed=seed)
    client = await connect(
        url, token=token, right_context=right_context, max_delay_ms=max_delay_ms,
        partials=partials, capitalize=capitalize,
    )
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    tracker = LatencyTracker(client.options)
    transcript = Transcript()

    def log(direction: str, payload: dict) -> None:
        if json_log is not None:
            record = {"t": round(loop.time() - t0, 4), "dir": direction, "msg": payload}
            json_log.write(json.dumps(record, ensure_ascii=False) + "\n")

    log("recv", client.ready.to_json())
    log("recv", {"type": "config", "config": client.options.to_json()})
    limits = client.ready.limits or DEFAULT_LIMITS

    async def send(event: AsrEvent) -> None:
        if event.at is not None:
            delay = t0 + event.at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
        if event.interim:
            # A hypothesis replaces the last one: only its first words fit in one message.
            words = message_words(event.words, limits)[:1] or [()]
            await client.send_hypothesis(words[0])
            log("send", {"type": "hypothesis", "words": [w.w for w in words[0]]})
            return
        for words in message_words(event.words, limits):
            await client.send_words(words)
            tracker.words_sent([w.w for w in words], loop.time())
            log("send", {"type": "words", "words": [w.w for w in words]})

    async def send_all() -> None:
        try:
            if isinstance(events, AsyncIterable):
                async for event in events:
                    await send(event)
            else:
                for event in events:
                    await send(event)
        except Exception:
            await client.close()  # ends the receiving loop below
            raise
        await client.end()
        tracker.flush_sent(loop.time())
        log("send", {"type": "end"})

    sender = asyncio.create_task(send_all())
    try:
        async for message in client:
            log("recv", message.to_json())
            if isinstance(message, Final):
                tracker.final_received(message, loop.time())
            transcript.apply(message)
            if isinstance(message, Final) and subtitles is not None:
                for k, word in enumerate(message.words):  # written as the server wrote them (Transcript.written)
                    start, end = _word_times(word, tracker.sent_at[message.start + k] - t0)
                    written = transcript.written[message.start + k]
                    subtitles.add(TimedWord(written, ID_TO_MARK.index(word.p), start, end))
            if isinstance(message, Error) and _loses_words(message) and errors is not None:
                errors.write(f"server error {message.code}: {message.message}\n")
                errors.flush()
            if view is not None and message.type in ("final", "partial"):
                view.update(transcript)
    finally:
        if not sender.done():
            sender.cancel()
        results = await asyncio.gather(sender, return_exceptions=True)
        await client.close()
        if view is not None:
            view.close(transcript)
        if subtitles is not None:
            subtitles.close()
    result = CaptionResult(transcript, tracker.summary(), client.options)
    failure = results[0]
    if isinstance(failure, Exception) and not isinstance(failure, ConnectionClosed):
        raise failure  # e.g. bad input read while streaming; what came back is written already
    if transcript.ended_words is None:
        reason = "; ".join(f"{e.code}: {e.message}" for e in transcript.errors)
        code = client.close_code
        why = "the server is shutting down" if code == 1001 else f"close code {code}"
        raise StreamClosedEarly(
            f"the server closed the stream early ({why}); {transcript.n_final} final words kept"
            + (f": {reason}" if reason else ""),
            result,
        )
    return result


def default_view(capitalize: bool) -> CaptionView:
    import shutil

    live = sys.stdout.isatty()
    return CaptionView(sys.stdout, live=live, width=shutil.get_terminal_size().columns, capitalize=capitalize)
