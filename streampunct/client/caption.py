"""Live captioning against a streaming server: the logic behind ``streampunct caption``.

ASR events (:mod:`streampunct.client.caption_input`: a paced plain-text transcript,
or JSON lines from a recognizer, with timestamps and interim hypotheses) are
streamed to the server: committed words as ``words``, interim ones as
``hypothesis``. Captions are shown as they come: each completed sentence on
its own line, and on a terminal a status line with the sentence in progress
and the provisional tail dimmed; or written as subtitles
(:mod:`streampunct.client.subtitles`). The final punctuated transcript and the
latency figures the client saw are returned. Whatever happens to the
connection, everything received is kept (:class:`StreamClosedEarly` carries
it).

The stream outlives its connection (:class:`~streampunct.client.stream_client.ResumableStream`):
when the connection drops, or the server closes it with 1001, 1011, 1012 or
1013, the client reconnects with backoff and resumes, sending again the words
that have no final yet, so that captions, subtitles and the transcript lose
nothing and repeat nothing; each interruption is one line on ``errors``. A
server that goes silent while it owes finals (it hangs without closing its
socket) is taken for a dropped connection after ``silence_timeout_s``.

A bad input line (:class:`~streampunct.client.caption_input.BadLine`, raised by the
events with ``--on-bad-line stop``) ends the stream there: every word sent
before it is finalized, and :class:`InputStopped` carries the result. So does a
cue the subtitles cannot hold (an SRT time at 100 hours, a time before 0:
:class:`~streampunct.client.subtitles.SubtitleWriter`): the cues before it are
written, nothing after it, and the connection is closed there.

A run can be stopped from outside (:class:`Interrupt`; ``streampunct caption``
wires SIGINT and SIGTERM to it): the first stop ends the input there and the
stream with ``end``, so that every word sent is finalized, and waits at most
``grace_s`` for the server's ``end``; an abort (a second signal, or the grace
running out) stops at once: the connection is cut without its closing
handshake, which a server that does not answer would hold up. Either way the
run returns what is final, with ``interrupted`` set.

Nothing is sent that the server must refuse for its size: committed words go
in messages of at most the server's ``max_words_per_message`` words and
``max_message_bytes`` bytes, and
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
import sys
import unicodedata
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import TextIO

from websockets.exceptions import ConnectionClosed

from streampunct.client.caption_input import AsrEvent, asr_chunks, read_transcript, text_events
from streampunct.client.stream_client import (
    SILENCE_TIMEOUT_S,
    ClientError,
    LatencySummary,
    LatencyTracker,
    Reconnect,
    ResumableStream,
    ResumeFailed,
    ResumeNotice,
    Transcript,
    message_words,
    open_client,
)
from streampunct.client.subtitles import SubtitleWriter, TimedWord
from streampunct.core.wire import (
    DEFAULT_LIMITS,
    IDLE_TIMEOUT_REASON,
    Error,
    ErrorCode,
    Final,
    HypothesisMessage,
    Message,
    SessionOptions,
)
from streampunct.errors import InputError
from streampunct.labels import ID_TO_MARK, PERIOD, QUESTION
from streampunct.text.normalize import join_texts

__all__ = [  # the readers and the message splitting live in caption_input / client; named here too
    "END_GRACE_S", "CaptionResult", "CaptionView", "InputStopped", "Interrupt", "Interrupted", "StreamClosedEarly",
    "asr_chunks", "caption", "connect", "default_view", "join_texts", "lost_words_errors", "message_words",
    "read_transcript",
]

_DIM, _RESET, _CLEAR_LINE = "\x1b[2m", "\x1b[0m", "\r\x1b[K"

#: Most words the client puts in one message: the server's default ``--max-words-per-message``.
MAX_WORDS_PER_MESSAGE = DEFAULT_LIMITS.max_words_per_message
#: Longer words are cut to this many characters (the server refuses longer ones).
MAX_WORD_CHARS = DEFAULT_LIMITS.max_word_chars
#: After a stop (the first Ctrl-C or SIGTERM), the longest wait for the finals of the words sent
#: (``caption --end-timeout-s``): the server's ``end`` normally comes within a few engine calls.
END_GRACE_S = 5.0
#: After an abort, the longest wait for the connection to be closed (it is cut at once: no
#: closing handshake is waited for; this bounds the rest of the closing).
ABORT_CLOSE_S = 1.0



def close_meaning(code: int | None, reason: str | None) -> str:
    """What a close the client did not ask for means, in words."""
    if code == 1001:
        return ("its idle timeout: no words for too long" if reason == IDLE_TIMEOUT_REASON
                else "the server is shutting down")
    return f"close code {code}" + (f": {reason}" if reason else "")

def _loses_words(error: Error) -> bool:
    """The errors that refuse a message, its words with it: ``bad_request`` and ``too_large``.
    After ``overloaded`` the server keeps the words; after ``internal`` the stream ends and is
    resumed, the words not yet final sent again (ResumableStream's rule)."""
    return error.code in (ErrorCode.BAD_REQUEST, ErrorCode.TOO_LARGE)


def lost_words_errors(transcript: Transcript) -> list[Error]:
    """The server's ``error`` messages that refused words (:func:`_loses_words`)."""
    return [e for e in transcript.errors if _loses_words(e)]


class CaptionView:
    """Renders captions: complete sentences as lines, the sentence in progress live.

    The text is the finals' ``text`` as the server sent it (sentence capitals,
    learned case, and with ``itn`` or a lexicon the written forms: "$25",
    "New York"). With ``live`` (a terminal), a status line shows the final
    text of the current sentence followed by the dimmed provisional tail (the
    partial's text), rewritten in place; without it, only complete lines are
    printed. ``capitalize`` is what the session asked the server for.
    """

    def __init__(self, out: TextIO, *, live: bool, width: int = 100, capitalize: bool = True) -> None:
        self.out = out
        self.live = live
        self.width = max(20, width)
        self.capitalize = capitalize
        self._finals = 0  # finals whose text is taken
        self._line = ""  # final text of the sentence in progress

    def _take(self, transcript: Transcript) -> list[str]:
        """The sentences the new finals complete; the rest goes on the line in progress."""
        done = []
        for start, end, text in transcript.texts[self._finals:]:
            ends = sum(1 for label in transcript.labels[start:end] if label in (PERIOD, QUESTION))
            for piece, complete in _sentences(text, ends):
                self._line = join_texts([self._line, piece])
                if complete:
                    done.append(self._line)
                    self._line = ""
        self._finals = len(transcript.texts)
        return done

    def update(self, transcript: Transcript) -> None:
        done = self._take(transcript)
        if done:
            self.out.write((_CLEAR_LINE if self.live else "") + " ".join(done) + "\n")
        if self.live:
            follows = transcript.partial_start == transcript.n_final and transcript.partial_text
            tail = transcript.partial_text if follows else " ".join(w.w + w.p for w in transcript.tail)
            current, tail = _fit(self._line, tail, self.width - 1)
            gap = " " if current and tail else ""
            self.out.write(f"{_CLEAR_LINE}{current}{gap}{_DIM}{tail}{_RESET}")
        self.out.flush()

    def close(self, transcript: Transcript) -> None:
        rest = " ".join([*self._take(transcript), self._line]).strip()
        self._line = ""
        self.out.write((_CLEAR_LINE if self.live else "") + (rest + "\n" if rest else ""))
        self.out.flush()


def _sentences(text: str, ends: int) -> list[tuple[str, bool]]:
    """``text`` cut after its ``ends`` sentence ends: ``(piece, ends a sentence)`` pairs.

    ``ends`` (the final's words with a period or question mark) says how many of
    its tokens ending in ".", "?" or "!" close a sentence (a written form with its own mark,
    "Yahoo!", takes no period after it); when a written form such as "p.m." makes more end
    in ".", question marks and plain words go first (then such forms and "!", the later first).
    """
    tokens = text.split()
    marked = [i for i, t in enumerate(tokens) if t.endswith((".", "?", "!"))]
    ranked = sorted(marked, key=lambda i: (not tokens[i].endswith("?"),
                                           "." in tokens[i][:-1] or tokens[i].endswith("!"), -i))
    out, prev = [], 0
    for i in sorted(ranked[:max(0, ends)]):
        out.append((" ".join(tokens[prev : i + 1]), True))
        prev = i + 1
    if prev < len(tokens):
        out.append((" ".join(tokens[prev:]), False))
    return out


def _fit(current: str, tail: str, width: int) -> tuple[str, str]:
    """Keep the end of ``current + " " + tail`` within ``width`` terminal columns (a wide
    character, as in Chinese or Japanese, takes two; a combining mark none)."""
    over = _columns(current) + 1 + _columns(tail) - width
    if over <= 0:
        return current, tail
    if over < _columns(current):
        return "\u2026" + _last_columns(current, _columns(current) - over - 1), tail
    return "", "\u2026" + _last_columns(tail, width - 1)


def _char_columns(char: str) -> int:
    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def _columns(text: str) -> int:
    return sum(map(_char_columns, text))


def _last_columns(text: str, columns: int) -> str:
    """The longest end of ``text`` within ``columns``, not starting with a mark of the character cut off."""
    used, start = 0, len(text)
    while start > 0 and used + _char_columns(text[start - 1]) <= columns:
        start -= 1
        used += _char_columns(text[start])
    while start < len(text) and _char_columns(text[start]) == 0:
        start += 1
    return text[start:]


@dataclass(frozen=True)
class CaptionResult:
    """What a captioning run produced.

    Attributes:
        transcript: final words and labels.
        latency: latency figures seen by the client.
        options: the session options the server confirmed.
        interrupted: the run was stopped from outside (:class:`Interrupt`).
        unfinal: words sent that got no final (an aborted run, or a stream closed early).
    """

    transcript: Transcript
    latency: LatencySummary
    options: SessionOptions
    interrupted: bool = False
    unfinal: int = 0


class Interrupt:
    """Stops a :func:`caption` run from outside (``streampunct caption``: SIGINT and SIGTERM).

    :meth:`stop` (the first signal) stops reading the input (an event not yet
    due is not sent) and ends the stream with ``end``: the server finalizes
    every word sent, and the run returns when its ``end`` has come, or
    ``grace_s`` after the stop with what came by then (an :meth:`abort`).
    :meth:`abort` (a second signal) returns at once with what is final. Use
    it from the event loop of the run.
    """

    def __init__(self, grace_s: float = END_GRACE_S) -> None:
        self.grace_s = grace_s
        self.stopping = asyncio.Event()
        self.aborting = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def stopped(self) -> bool:
        return self.stopping.is_set()

    @property
    def aborted(self) -> bool:
        return self.aborting.is_set()

    def stop(self) -> None:
        """End the input and the stream; a second call aborts."""
        if self.stopping.is_set():
            self.abort()
            return
        self.stopping.set()
        self._timer = asyncio.get_running_loop().call_later(self.grace_s, self.abort)

    def abort(self) -> None:
        """Return at once with what is final."""
        self.stopping.set()
        self.aborting.set()
        self.cancel()

    def cancel(self) -> None:
        """Drop the grace timer (the run is over)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class Interrupted(ClientError):
    """The run was aborted before its connection was up: nothing was sent."""


class StreamClosedEarly(ClientError):
    """The server closed the stream before its ``end`` (shutdown, error) and it could not be
    resumed; ``result`` has what came."""

    def __init__(self, message: str, result: CaptionResult) -> None:
        super().__init__(message)
        self.result = result


class InputStopped(InputError):
    """Reading the input failed (a bad line, with ``--on-bad-line stop``): every word sent
    before it was finalized, and ``result`` has them; or the subtitles could not hold a cue
    (its time): the cues before it are written, and ``result`` has the finals that came."""

    def __init__(self, message: str, result: CaptionResult) -> None:
        super().__init__(message)
        self.result = result


#: One-line connection errors (:func:`streampunct.client.stream_client.open_client`).
connect = open_client


class _SubtitleHold:
    """Writes the cue in progress when no final has come for as long as a cue may last
    (``max_duration_s`` of the cue limits, in wall time): a pause in the speech must not hold
    words back until the speaker goes on. (While finals come, the cue builder itself cuts a
    cue whose words span that long.) A cue the subtitles refuse goes to ``on_error``."""

    def __init__(self, subtitles: SubtitleWriter | None, loop: asyncio.AbstractEventLoop,
                 on_error) -> None:
        self.subtitles = subtitles
        self.loop = loop
        self.on_error = on_error
        self._last: float = 0.0  # when the last final came
        self._timer: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        """After each final."""
        if self.subtitles is None:
            return
        self._last = self.loop.time()
        if self.subtitles.pending and self._timer is None:
            self._timer = self.loop.call_at(self._last + self.subtitles.builder.limits.max_duration_s, self._expire)

    def _expire(self) -> None:
        self._timer = None
        if self.subtitles is None or not self.subtitles.pending:
            return
        hold = self.subtitles.builder.limits.max_duration_s
        if self.loop.time() - self._last >= hold - 1e-3:
            try:
                self.subtitles.flush()
            except InputError as e:  # a cue the format cannot hold: the run stops there
                self.on_error(e)
        else:  # a final came meanwhile: wait for as long after it
            self._timer = self.loop.call_at(self._last + hold, self._expire)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def _until_aborted(awaitable, interrupt: Interrupt | None, *, on_stop: bool = False,
                         also: asyncio.Event | None = None) -> tuple[bool, object]:
    """Run ``awaitable`` to its end, ``(True, its result)`` (its exception is raised), or until
    ``interrupt`` aborts (``on_stop``: stops) or ``also`` is set: then it is cancelled and
    ``(False, None)`` comes back."""
    task = asyncio.ensure_future(awaitable)
    events = [also] if also is not None else []
    if interrupt is not None:
        events.append(interrupt.stopping if on_stop else interrupt.aborting)
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait({task, *waits}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    if task.cancelled():
        return False, None
    return True, task.result()


async def _events_until_stopped(
    events: Sequence[AsrEvent] | AsyncIterable[AsrEvent], interrupt: Interrupt | None,
) -> AsyncIterator[AsrEvent]:
    """``events`` until ``interrupt`` stops the run (a read waiting for input is cancelled)."""
    if not isinstance(events, AsyncIterable):
        for event in events:
            if interrupt is not None and interrupt.stopped:
                return
            yield event
        return
    if interrupt is None:
        async for event in events:
            yield event
        return
    iterator = aiter(events)
    stopped = asyncio.ensure_future(interrupt.stopping.wait())
    step: asyncio.Future | None = None
    try:
        while not interrupt.stopped:
            step = asyncio.ensure_future(anext(iterator))
            await asyncio.wait({step, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                return
            try:
                event = step.result()
            except StopAsyncIteration:
                return
            yield event
    finally:
        stopped.cancel()
        if step is not None and not step.done():
            step.cancel()
            await asyncio.gather(step, return_exceptions=True)
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()


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
    itn: bool | None = None,
    lexicon: Sequence[tuple[str, str]] | None = None,
    view: CaptionView | None = None,
    json_log: TextIO | None = None,
    subtitles: SubtitleWriter | None = None,
    errors: TextIO | None = None,
    reconnect: Reconnect | None = None,
    interrupt: Interrupt | None = None,
    silence_timeout_s: float | None = SILENCE_TIMEOUT_S,
) -> CaptionResult:
    """Stream ASR ``events`` (or plain ``words`` paced at ``wps``) to the server and collect the captions.

    Every ``error`` the server answers with, but ``overloaded``, is written to
    ``errors`` as it comes (``server error CODE: MESSAGE``); all are kept in
    the transcript (:func:`lost_words_errors`). A lost connection is resumed
    as ``reconnect`` says (default :class:`~streampunct.client.stream_client.Reconnect`;
    ``Reconnect(attempts=0)``: never), with one line on ``errors`` each time.
    ``itn`` and ``lexicon`` (``(spoken, written)`` pairs) are sent as the session's
    ``config.itn`` and ``config.lexicon``. A server silent for ``silence_timeout_s``
    while it owes finals is taken for a dropped connection (None or 0: never;
    :class:`~streampunct.client.stream_client.ResumableStream`).

    Raises :class:`StreamClosedEarly` (after closing the view and the
    subtitles, so nothing received is lost) when the stream ends before the
    server's ``end`` and cannot be resumed, and :class:`InputStopped` when the
    events raised :class:`~streampunct.errors.InputError` (a bad line): the
    words sent before it are finalized first; or when ``subtitles`` refused a
    cue (its time): the cues before it are written, none after it.

    ``interrupt`` (:class:`Interrupt`) stops the run from outside; a stopped
    run returns what is final (``interrupted`` set, ``unfinal`` words sent
    without a final) instead of raising either, and one aborted before its
    connection was up raises :class:`Interrupted`.
    """
    if events is None:
        if words is None:
            raise ValueError("caption() needs words or events")
        events = text_events(words, wps=wps, max_chunk=max_chunk, seed=seed)

    def notice(n: ResumeNotice) -> None:
        if errors is not None:
            errors.write(n.format() + "\n")
            errors.flush()

    loop = asyncio.get_running_loop()
    started = loop.time()

    def log(direction: str, message: Message) -> None:  # every message, as it goes (resumes too)
        if json_log is not None:
            record = {"t": round(loop.time() - started, 4), "dir": direction, "msg": message.to_json()}
            json_log.write(json.dumps(record, ensure_ascii=False) + "\n")

    connecting = ResumableStream.connect(
        url, token=token, reconnect=reconnect, on_notice=notice, right_context=right_context,
        max_delay_ms=max_delay_ms, partials=partials, capitalize=capitalize, itn=itn, lexicon=lexicon,
        on_message=log if json_log is not None else None, silence_timeout_s=silence_timeout_s,
    )
    if interrupt is None:
        stream = await connecting
    else:
        # nothing is sent before the connection is up: a stop has no finals to wait for
        connected, stream = await _until_aborted(connecting, interrupt, on_stop=True)
        if not connected:
            interrupt.cancel()
            raise Interrupted("stopped before the connection was up; nothing was sent")
        assert isinstance(stream, ResumableStream)
    t0 = loop.time()
    tracker = LatencyTracker(stream.options)
    transcript = Transcript()

    async def send(event: AsrEvent) -> None:
        if event.at is not None:
            delay = t0 + event.at - loop.time()
            if delay > 0:
                if interrupt is None:
                    await asyncio.sleep(delay)
                else:  # not sent when the run stops before it is due
                    try:
                        await asyncio.wait_for(interrupt.stopping.wait(), delay)
                        return
                    except TimeoutError:
                        pass
        limits = stream.limits
        if event.interim:
            # A hypothesis replaces the last one: only its first words fit in one message.
            words = message_words(event.words, limits, HypothesisMessage)[:1] or [()]
            await stream.send_hypothesis(words[0])
            return
        for words in message_words(event.words, limits):
            sent = await stream.send_words(words)
            tracker.words_sent([w.w for w in sent], loop.time())

    input_failure: list[Exception] = []

    async def send_all() -> None:
        try:
            async for event in _events_until_stopped(events, interrupt):
                await send(event)
        except (InputError, OSError) as e:  # the input broke off: what was sent is still finalized
            input_failure.append(e)
        await stream.end()
        tracker.flush_sent(loop.time())

    sender = asyncio.create_task(send_all())
    bad_cue: list[InputError] = []  # a cue the subtitles refused: nothing more is written
    cue_refused = asyncio.Event()

    def refuse_cue(error: InputError) -> None:
        if not bad_cue:
            bad_cue.append(error)
        cue_refused.set()

    hold = _SubtitleHold(subtitles, loop, refuse_cue)
    resume_failed: ResumeFailed | None = None

    async def receive() -> None:
        async for message in stream:
            if isinstance(message, Final):
                tracker.final_received(message, loop.time())
            transcript.apply(message)
            if isinstance(message, Final) and subtitles is not None:
                # the words as spoken (with their times) and the final's text as the server wrote it
                timed = [TimedWord(word.w, ID_TO_MARK.index(word.p),
                                   *_word_times(word, tracker.sent_at[message.start + k] - t0))
                         for k, word in enumerate(message.words)]
                try:
                    subtitles.add_final(timed, message.text, message.held)
                except InputError as e:  # a cue the format cannot hold: the run stops there
                    refuse_cue(e)
                    return
                hold.arm()
            if isinstance(message, Error) and _loses_words(message) and errors is not None:
                errors.write(f"server error {message.code}: {message.message}\n")
                errors.flush()
            if view is not None and message.type in ("final", "partial"):
                view.update(transcript)

    try:
        # aborted, or a cue refused: what came is kept
        await _until_aborted(receive(), interrupt, also=cue_refused)
    except ResumeFailed as e:
        resume_failed = e
    finally:
        if interrupt is not None:
            interrupt.cancel()
        if not sender.done():
            sender.cancel()
        results = await asyncio.gather(sender, return_exceptions=True)
        if interrupt is not None and interrupt.aborted:
            # at once: a server that does not answer would hold the closing handshake up
            stream.abort()
            try:
                await asyncio.wait_for(stream.close(), ABORT_CLOSE_S)
            except (TimeoutError, ConnectionClosed):
                pass
        else:
            await stream.close()
        if view is not None:
            view.close(transcript)
        hold.cancel()
        if subtitles is not None and not bad_cue:
            try:
                subtitles.close()
            except InputError as e:  # the last cue cannot be written
                refuse_cue(e)
    stopped = interrupt is not None and interrupt.stopped
    result = CaptionResult(transcript, tracker.summary(), stream.options, interrupted=stopped,
                           unfinal=len(stream.pending))
    failure = results[0]
    if isinstance(failure, Exception) and not isinstance(failure, ConnectionClosed | ClientError):
        raise failure  # a bug; what came back is written already
    if bad_cue:
        written = subtitles.count if subtitles is not None else 0
        raise InputStopped(f"{bad_cue[0]}; stopped there: the {written} cues before it are written", result)
    if stopped:
        return result
    if transcript.ended_words is None:
        unsent = f", {len(stream.pending)} words without a final" if stream.pending else ""
        kept = f"{transcript.n_final} final words kept{unsent}"
        if resume_failed is not None:
            # the notice said why on ``errors`` already (notice()): not twice
            why = ("the connection was lost and the stream could not be resumed"
                   + (" (above)" if errors is not None else f": {resume_failed}"))
        else:
            code, close_reason = stream.close_code, stream.close_reason
            why = ("the connection was lost before the stream ended"
                   + (f" ({close_reason})" if close_reason else "") if code == 1006 else
                   f"the server closed the stream early ({close_meaning(code, close_reason)})")
        reason = "; ".join(f"{e.code}: {e.message}" for e in transcript.errors)
        if input_failure:
            why = f"{input_failure[0]}; then {why}"
        raise StreamClosedEarly(f"{why}; {kept}" + (f": {reason}" if reason else ""), result)
    if input_failure:
        if not stream.n_sent:  # nothing sent: the input's own message (binary stdin: as punctuate says it)
            raise InputStopped(str(input_failure[0]), result)
        raise InputStopped(f"{input_failure[0]}; stopped reading there: the {transcript.n_final} words sent "
                           "before it are final", result)
    return result


def default_view(capitalize: bool, out: TextIO | None = None) -> CaptionView:
    """Captions on ``out`` (default: stdout), live when it is a terminal."""
    import shutil

    out = sys.stdout if out is None else out
    return CaptionView(out, live=out.isatty(), width=shutil.get_terminal_size().columns, capitalize=capitalize)
