"""Reading transcripts: text encodings by byte-order mark, and refusing binary input.

``punctuate`` and ``caption`` read files (or stdin) that come from anywhere:
Windows editors write UTF-8 with a BOM or UTF-16; a wrong path can point at
a binary; older tools write Latin-1. Text is decoded by its BOM (UTF-32,
UTF-16, UTF-8); without one, as UTF-16 when every other byte is NUL (a
BOM-less UTF-16 file), else as UTF-8. At the first byte that is not UTF-8
(with a warning): when UTF-8 letters of more than one byte came before it, the
text is UTF-8 with a few pasted Windows bytes (smart quotes), and each byte
that is not part of valid UTF-8 is read as Windows-1252 (the superset of
Latin-1 that older tools write), so its UTF-8 accents stay; when none did, the
rest is read as Windows-1252 (a Latin-1 file).
Input that still holds NUL bytes or mostly control characters is refused
with an :class:`~streampunct.errors.InputError`, and so is a line longer than
:data:`MAX_LINE_CHARS` (text with no line ends: ``tr -d '\\n'``, or a device
that never ends one): stdin, a device or a pipe is read in pieces and refused at
the first that breaks these rules, so an endless input (``/dev/zero``) is
refused at once, not read into memory until it runs out (a regular file ends,
and is decoded whole).

There is one such check (:class:`BinaryCheck`), for a whole file
(:func:`decode_text`, ``punctuate``, ``caption FILE``) and for text that comes
in pieces (:class:`TextStream`, :func:`text_lines`: ``caption -`` reading a
live pipe): the same rules, the same message; a stream is refused as soon as
what has come breaks them.

Output files are written whole or not at all (:class:`AtomicTextFile`): into
a temporary file in the same folder, moved over the target at the end.
"""

from __future__ import annotations

import codecs
import errno
import io
import logging
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, TextIO, cast

from streampunct.errors import InputError

logger = logging.getLogger(__name__)

#: Byte-order marks, longest first (the UTF-32 LE mark starts with the UTF-16 LE one).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
#: Share of control (or undecodable) characters above which text is taken for binary.
_MAX_CONTROL_SHARE = 0.3
#: Shorter texts are too short to judge by their share of control characters.
_MIN_JUDGED = 32
_TEXT_CONTROLS = frozenset("\t\n\r\f\v")
#: ``str.translate`` table deleting what :class:`BinaryCheck` counts: other control characters, U+FFFD.
_ODD_CHARS = {c: None for c in [*range(32), 0xFFFD] if chr(c) not in _TEXT_CONTROLS}
#: The longest line (characters between line ends) a text may hold: 64 Mi, far beyond a
#: transcript's line, or a whole Whisper JSON file on one line (about 1 MB an hour of speech).
MAX_LINE_CHARS = 64 * 2**20
#: Bytes read at a time from a file or stdin (the first piece also chooses the encoding).
_READ_BYTES = 1 << 20


def _utf16_without_bom(raw: bytes) -> str | None:
    """``utf-16-le``/``-be`` when one byte of (nearly) every pair is NUL, as in UTF-16 text of
    mostly Latin letters; None otherwise."""
    pairs = len(raw) // 2
    if pairs < 2 or len(raw) % 2:
        return None
    high_odd = raw[1::2].count(0) / pairs
    high_even = raw[0::2].count(0) / pairs
    if high_odd >= 0.5 and high_even < 0.05:
        return "utf-16-le"
    if high_even >= 0.5 and high_odd < 0.05:
        return "utf-16-be"
    return None


def _decode_without_bom(raw: bytes, name: str) -> str:
    utf16 = _utf16_without_bom(raw)
    if utf16 is not None:
        return raw.decode(utf16, errors="replace")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        if b"\x00" in raw:
            return raw.decode("utf-8", errors="replace")  # binary: refused below
        if _has_multibyte(raw[:e.start]):
            logger.warning("%s is not UTF-8 (byte 0x%02x at offset %d): such bytes read as Windows-1252 "
                           "(Latin-1)", name, raw[e.start], e.start)
            return raw.decode("utf-8", errors=_CP1252_BYTES)
        logger.warning("%s is not UTF-8 (byte 0x%02x at offset %d): read as Windows-1252 (Latin-1)",
                       name, raw[e.start], e.start)
        return raw.decode("cp1252", errors=_LATIN1_FALLBACK)


def _has_multibyte(utf8: bytes) -> bool:
    """Valid UTF-8 ``utf8`` holds a character of more than one byte."""
    return any(b >= 0x80 for b in utf8)


def _as_latin1(error: UnicodeError) -> tuple[str, int]:
    """Windows-1252 leaves five bytes undefined: Latin-1 reads them (as C1 controls)."""
    assert isinstance(error, UnicodeDecodeError)
    return error.object[error.start:error.end].decode("latin-1"), error.end


_LATIN1_FALLBACK = "streampunct-latin1"
codecs.register_error(_LATIN1_FALLBACK, _as_latin1)


def _as_cp1252(error: UnicodeError) -> tuple[str, int]:
    """UTF-8's error handler for a text that is not all UTF-8: the bytes that are not read as
    Windows-1252 (Latin-1 where it leaves one undefined)."""
    assert isinstance(error, UnicodeDecodeError)
    return error.object[error.start:error.end].decode("cp1252", errors=_LATIN1_FALLBACK), error.end


_CP1252_BYTES = "streampunct-cp1252-bytes"
codecs.register_error(_CP1252_BYTES, _as_cp1252)


class BinaryCheck:
    """The one test that input is text, fed the decoded text whole or piece by piece.

    :meth:`add` raises :class:`InputError` when what it has seen so far holds a
    NUL character, or, from :data:`_MIN_JUDGED` characters on, when more than
    :data:`_MAX_CONTROL_SHARE` of them are control characters (other than tab,
    newline, carriage return, form feed, vertical tab) or undecodable bytes
    (U+FFFD); or a line (between ``\\n`` or ``\\r`` line ends) longer than
    ``max_line`` characters (:data:`MAX_LINE_CHARS`). ``name`` (a path, or
    ``stdin``) opens the message.
    """

    def __init__(self, name: str, max_line: int | None = None) -> None:
        self.name = name
        self.chars = 0
        self.odd = 0
        self.max_line = MAX_LINE_CHARS if max_line is None else max_line
        self.line = 0  # characters of the line in progress (since the last line end)

    def add(self, text: str) -> str:
        """``text``, after checking it with everything seen before."""
        if "\x00" in text:
            raise InputError(f"{self.name} looks binary (it holds NUL bytes); give a UTF-8 or UTF-16 text file")
        self.chars += len(text)
        self.odd += len(text) - len(text.translate(_ODD_CHARS))
        if self.chars >= _MIN_JUDGED and self.odd > _MAX_CONTROL_SHARE * self.chars:
            raise InputError(f"{self.name} looks binary ({self.odd} of {self.chars} characters are control "
                             "or undecodable bytes); give a UTF-8 or UTF-16 text file")
        self._check_lines(text)
        return text

    def _check_lines(self, text: str) -> None:
        """Count the line in progress through ``text``, in windows of ``max_line`` characters: a
        line that starts and ends in one window is no longer than the limit, so only the line
        that runs on from the window before, and the one that runs into the next, are counted."""
        limit = self.max_line
        for start in range(0, len(text), limit):
            end = min(len(text), start + limit)
            first = min((i for i in (text.find("\n", start, end), text.find("\r", start, end)) if i >= 0),
                        default=-1)
            if first < 0:
                self.line += end - start
            else:
                self.line += first - start
                self._line_fits()
                self.line = end - 1 - max(text.rfind("\n", start, end), text.rfind("\r", start, end))
            self._line_fits()

    def _line_fits(self) -> None:
        if self.line > self.max_line:
            self.refuse_line()

    def refuse_line(self) -> None:
        """Raise the :class:`InputError` of a line longer than ``max_line``."""
        raise InputError(f"{self.name} has a line of more than {self.max_line:,} characters (no line end); "
                         "give a text file with line ends")


def decode_text(raw: bytes, name: str = "input") -> str:
    """The text of ``raw``; raises :class:`InputError` for binary data."""
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            text = raw[len(bom):].decode(encoding, errors="replace")
            break
    else:
        text = _decode_without_bom(raw, name)
    return BinaryCheck(name).add(text)


class TextStream:
    """:func:`decode_text` for bytes that come in pieces (a live pipe), each piece decoded as it comes.

    The encoding is chosen from the first piece (at least 4 bytes, or a whole
    line, so that a short first line is not held back): a byte-order mark,
    else UTF-16 when every other byte is NUL, else
    UTF-8, and at the first byte that is not, as a whole file is read: each
    such byte as Windows-1252 when UTF-8 letters of more than one byte came
    before it, else the rest as Windows-1252 (with a warning either way).
    Every piece goes through the same :class:`BinaryCheck` as a whole file.
    """

    def __init__(self, name: str = "stdin", max_line: int | None = None) -> None:
        self.name = name
        self.check = BinaryCheck(name, max_line)
        self._head = b""  # bytes before the encoding is known
        self._decoder: codecs.IncrementalDecoder | None = None
        self._utf8 = False  # UTF-8 so far (falls back to Windows-1252)
        self._multibyte = False  # a character of more than one byte has come (it was UTF-8 then)
        self._offset = 0  # bytes given to the decoder

    def feed(self, raw: bytes, final: bool = False) -> str:
        """The text that ``raw`` completes; raises :class:`InputError` for binary data."""
        if self._decoder is None:
            self._head += raw
            if not final and len(self._head) < 4 and b"\n" not in self._head:
                return ""  # maybe a byte-order mark, or UTF-16: the next bytes tell (no line is held back)
            raw, self._head = self._start(self._head), b""
        return self.check.add(self._decode(raw, final))

    def close(self) -> str:
        """The rest, at the end of the input."""
        return self.feed(b"", final=True)

    def _start(self, raw: bytes) -> bytes:
        for bom, encoding in _BOMS:
            if raw.startswith(bom):
                self._decoder = codecs.getincrementaldecoder(encoding)(errors="replace")
                return raw[len(bom):]
        utf16 = _utf16_without_bom(raw[: len(raw) // 2 * 2])  # whole pairs: a piece may end inside one
        if utf16 is not None:
            self._decoder = codecs.getincrementaldecoder(utf16)(errors="replace")
        else:
            self._decoder = codecs.getincrementaldecoder("utf-8")()
            self._utf8 = True
        return raw

    def _decode(self, raw: bytes, final: bool) -> str:
        assert self._decoder is not None
        offset, self._offset = self._offset, self._offset + len(raw)
        if not self._utf8:
            return self._decoder.decode(raw, final)
        pending = len(self._decoder.getstate()[0])
        try:
            text = self._decoder.decode(raw, final)
        except UnicodeDecodeError as e:
            data = e.object  # the bytes held back from the piece before, then this piece
            if b"\x00" in data:
                self.check.add("\x00")  # binary: refused
            self._utf8 = False
            where = offset - pending + e.start
            if self._multibyte or _has_multibyte(bytes(data[:e.start])):
                logger.warning("%s is not UTF-8 (byte 0x%02x at offset %d): such bytes read as Windows-1252 "
                               "(Latin-1)", self.name, data[e.start], where)
                self._decoder = codecs.getincrementaldecoder("utf-8")(errors=_CP1252_BYTES)
            else:
                logger.warning("%s is not UTF-8 (byte 0x%02x at offset %d): read as Windows-1252 (Latin-1)",
                               self.name, data[e.start], where)  # as decode_text says it: read_text reads here
                self._decoder = codecs.getincrementaldecoder("cp1252")(errors=_LATIN1_FALLBACK)
            return bytes(data[:e.start]).decode("utf-8") + self._decoder.decode(bytes(data[e.start:]), final)
        self._multibyte = self._multibyte or any(ord(ch) >= 0x80 for ch in text)
        return text


#: What a command that reads stdin says when it was started with stdin closed (``cmd <&-``).
STDIN_CLOSED = "stdin is closed: give a file, or pipe the text in"


def text_lines(stream: TextIO, name: str = "stdin") -> Iterator[str]:
    """Lines of a text stream (with their line ends; the last one may have none) as they come,
    decoded by :class:`TextStream` from the bytes of its file descriptor when it has one
    (``sys.stdin``; nothing must have been read from it before), checked by :class:`BinaryCheck`
    either way; raises :class:`InputError` at the first piece of binary data."""
    if stream is None:  # sys.stdin of a process started with stdin closed (`cmd <&-`)
        raise InputError(STDIN_CLOSED)
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # a text-only stream (io.StringIO)
        check = BinaryCheck(name)
        for line in stream:
            yield check.add(line)
        return
    decoder = TextStream(name)
    held: list[str] = []  # the line in progress
    held_chars = 0  # its length: lines end at "\n" alone here, so a "\r"-only stream is one line
    while True:
        # os.read, not the buffered reader: what has come, at once; and a read left waiting in a
        # daemon thread then holds no lock that the interpreter's exit would wait for
        raw = os.read(fd, 1 << 16)
        *lines, last = (decoder.feed(raw) if raw else decoder.close()).split("\n")
        if lines:
            lines[0] = "".join(held) + lines[0]
            held, held_chars = [], 0
        for line in lines:
            yield line + "\n"
        if last:
            held.append(last)
            held_chars += len(last)
            if held_chars > decoder.check.max_line:
                decoder.check.refuse_line()
        if not raw:
            if held:
                yield "".join(held)
            return


_LINE_END = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """The lines of a text file: split at its line ends only, ``\\n``, ``\\r\\n`` and ``\\r``
    (``str.splitlines`` also splits at form feeds, which ``pdftotext`` writes at every page
    break, and at U+2028, U+0085 and other characters that sit inside a line); no empty line
    after a final line end."""
    lines = _LINE_END.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def require_file(path: str | Path) -> Path:
    """``path``, or an :class:`InputError` saying it is missing or a directory. A pipe or a
    device (``<(cmd)``, ``/dev/stdin``) is read like a file."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{path} is a directory, not a file")
    if not path.exists():
        raise InputError(f"no such file: {path}")
    return path


def read_text(source: str | Path) -> str:
    """Decoded text of a file, or of stdin when ``source`` is ``"-"``. A regular file is decoded
    whole (:func:`decode_text`); stdin, a device or a pipe is read and checked a piece at a time
    (:func:`read_stream`), so that binary data or a line without end (``/dev/zero``, a pipe that
    never ends a line) is refused as soon as it comes."""
    if str(source) == "-":
        if sys.stdin is None:  # started with stdin closed (`cmd <&-`)
            raise InputError(STDIN_CLOSED)
        return read_stream(sys.stdin.buffer, "stdin")
    path = require_file(source)
    try:
        if path.is_file():  # a regular file: it ends; decoded whole
            return decode_text(path.read_bytes(), str(path))
        with open(path, "rb") as f:  # a device or a pipe (/dev/zero, <(cmd)): may never end
            return read_stream(f, str(path))
    except PermissionError:
        raise InputError(f"cannot read {path}: permission denied") from None


def read_stream(stream: BinaryIO, name: str, max_line: int | None = None) -> str:
    """The text of a binary stream to its end, decoded by :class:`TextStream` as
    :func:`decode_text` decodes a whole file (the encoding chosen from the first
    :data:`_READ_BYTES`), refused with an :class:`InputError` at the first piece that is binary
    or makes a line longer than ``max_line`` (:data:`MAX_LINE_CHARS`)."""
    decoder = TextStream(name, max_line)
    parts: list[str] = []
    while raw := stream.read(_READ_BYTES):
        parts.append(decoder.feed(raw))
    parts.append(decoder.close())
    return "".join(parts)


_FD_PATH = re.compile(r"/(?:dev/fd|proc/(self|\d+)/fd)/(\d+)")


def _inherited_fd(path: Path) -> int | None:
    """The descriptor of this process that ``path`` names (``/dev/stdout``, ``/dev/fd/N``,
    ``/proc/self/fd/N``), else None. Written through, not reopened: reopening would truncate
    what a shell's ``>>`` appends to, and replacing the file would drop it."""
    spelled = os.path.abspath(path)
    std = {"/dev/stdout": 1, "/dev/stderr": 2}.get(spelled)
    if std is not None:
        return std
    m = _FD_PATH.fullmatch(spelled)
    if m is None or (m.group(1) not in (None, "self") and int(m.group(1)) != os.getpid()):
        return None
    fd = int(m.group(2))
    try:
        os.fstat(fd)
    except OSError:
        return None
    return fd


def file_in_the_way(folder: Path) -> Path | None:
    """The file that stands where ``folder`` or one of its parents should be (None: none does)."""
    return next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)


#: The errors of a wrong output path (a usage error): no such folder, a file in the way, no permission.
_PATH_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.EEXIST, errno.EACCES, errno.EPERM})


def cannot_write(path: str | Path, error: OSError, *, option: str | None = None) -> InputError | OSError:
    """A wrong output path as an :class:`InputError` that says why in words (``cannot write
    out/x.txt: no folder out``; with ``option``, ``cannot write --json out/x.txt: ...``); any
    other ``error`` (a full disk, a read-only file system) as it is, a fault that keeps its
    traceback."""
    if error.errno not in _PATH_ERRNOS:
        return error
    path = Path(path)
    folders = list(reversed([path.parent, *path.parent.parents]))  # from the root down
    blocker = file_in_the_way(path.parent)
    missing = next((p for p in folders if not p.exists()), None)
    if blocker is not None:
        why = f"{blocker} is a file, not a folder"
    elif missing is not None and error.errno == errno.ENOENT:
        why = f"no folder {missing}"
    elif error.errno in (errno.EACCES, errno.EPERM):
        why = f"no permission to write in {next((p for p in reversed(folders) if p.exists()), path.parent)}"
    else:
        why = error.strerror or str(error)
    return InputError(f"cannot write {option + ' ' if option else ''}{path}: {why}")


#: Writes the machine refused (a full disk, a file-size limit, a quota, a read-only file system):
#: the CLI says :func:`write_error_message` in one line and exits 1.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS})


def write_error_message(error: OSError) -> str:
    """``cannot write FILE: why`` (``cannot write: why`` when the error names no file)."""
    return f"cannot write{' ' + str(error.filename) if error.filename else ''}: {error.strerror or error}"


def _named(error: OSError, name: str, *, instead_of: Path | None = None) -> None:
    """Make ``error`` name ``name``, the file the user asked for, when it names none (or only
    ``instead_of``, the temporary file written in its place), for :func:`write_error_message`."""
    if error.errno is not None and (error.filename is None or (
            instead_of is not None and str(error.filename) == str(instead_of))):
        error.filename = name


def to_devnull(stream: TextIO) -> None:
    """Point ``stream``'s file descriptor at /dev/null: writes (the flush at exit) go nowhere."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, stream.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass


class _NamedWriter:
    """A text file whose write errors (a full disk, a file-size limit) name ``path``, the file
    the user asked for, not the temporary one that is written (or none)."""

    def __init__(self, file: TextIO, path: Path) -> None:
        self._file = file
        self._path = path

    def _call(self, method: str, *args):
        try:
            return getattr(self._file, method)(*args)
        except OSError as e:
            _named(e, str(self._path))
            raise

    def write(self, text: str) -> int:
        return self._call("write", text)

    def flush(self) -> None:
        self._call("flush")

    def close(self) -> None:
        self._call("close")

    @property
    def closed(self) -> bool:
        return self._file.closed

    def __getattr__(self, name: str):
        return getattr(self._file, name)


class AtomicTextFile:
    """A text file written whole or not at all: into a temporary file next to ``path``, which
    :meth:`commit` moves over it (``os.replace``) and :meth:`discard` removes. A crash, or an
    error that discards it, leaves what was at ``path`` as it was. The file gets the mode the
    target had, or that a new file gets (0666 less the umask).

    A symbolic link is followed: the file it points to is replaced, the link stays. A path
    that is not a regular file (a FIFO, a device) cannot be replaced, nor can one of this
    process's descriptors (``/dev/stdout``, ``/dev/fd/N``: a shell's ``>`` or ``>>`` target):
    what was written goes into it at :meth:`commit`, in one piece (through the descriptor, at
    its offset), and :meth:`discard` writes nothing.

    ``file`` is the open temporary file (UTF-8), or a buffer for a path that is not a file.
    """

    def __init__(self, path: str | Path, *, option: str | None = None) -> None:
        """``option``: the option that named ``path`` (``--json``), for the message of a wrong one."""
        self.path = Path(path)
        if self.path.is_dir():
            raise IsADirectoryError(f"{self.path} is a directory")
        self._fd = _inherited_fd(self.path)
        try:
            regular = stat.S_ISREG(os.stat(self.path).st_mode)
        except FileNotFoundError:
            regular = True  # a new file
        except NotADirectoryError as e:  # a file where a folder of the path should be
            raise cannot_write(self.path, e, option=option) from None
        self._stream = self._fd is not None or not regular  # a descriptor of ours, a FIFO or a device
        self.temp: Path | None = None
        self.made_folders: list[Path] = []  # folders made for it, removed (when empty) by discard
        if self._stream:
            self.file: TextIO = io.StringIO()
            self._target = self.path
            return
        target = Path(os.path.realpath(self.path))
        self._target = target
        try:
            fd, temp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        except OSError as e:  # name the file asked for (a link: the file it points to), not the temporary one
            raise cannot_write(target if target != Path(os.path.abspath(self.path)) else self.path, e,
                               option=option) from None
        self.temp = Path(temp)
        self.file = cast(TextIO, _NamedWriter(os.fdopen(fd, "w", encoding="utf-8"), self.path))

    def commit(self) -> None:
        """Move what was written over ``path`` (or, for a FIFO or device, write it there). A write
        the machine refuses (a full disk, a file-size limit) leaves ``path`` as it was, the
        temporary file removed, and raises that ``OSError`` with ``path`` as its file name."""
        try:
            self._commit()
        except OSError as e:
            self.discard()
            _named(e, str(self.path), instead_of=self.temp)
            raise

    def _commit(self) -> None:
        if self._stream:
            if not self.file.closed:
                text = self.file.getvalue()
                self.file.close()
                if self._fd is not None:  # where the descriptor points, at its offset (`>> log` appends)
                    for std in (sys.stdout, sys.stderr):
                        if std is not None and not std.closed:
                            std.flush()
                    with os.fdopen(os.dup(self._fd), "w", encoding="utf-8") as out:
                        out.write(text)
                else:
                    with open(self._target, "w", encoding="utf-8") as out:
                        out.write(text)
            return
        assert self.temp is not None
        if self.file.closed and not self.temp.exists():
            return
        self.file.close()
        try:
            mode = self._target.stat().st_mode & 0o7777
        except OSError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(self.temp, mode)
        os.replace(self.temp, self._target)

    def discard(self) -> None:
        """Drop what was written; ``path`` stays as it was (also when closing the temporary
        file fails: its last buffered writes on a full disk)."""
        try:
            self.file.close()
        except OSError:
            pass
        if self.temp is not None:
            self.temp.unlink(missing_ok=True)
        _remove_empty(self.made_folders)  # those made for it (output_file), if still empty


def utf8_stdout() -> TextIO:
    """``sys.stdout``, writing UTF-8 whatever the locale says (as every output file is written:
    a transcript's emoji or Cyrillic must not stop a filter under a Latin-1 or ANSI locale); an
    :class:`InputError` when the command was started with it closed (``cmd >&-``)."""
    if sys.stdout is None:
        raise InputError("stdout is closed (started with >&-): let it go to a terminal, a file or a pipe")
    if (sys.stdout.encoding or "").lower().replace("-", "").replace("_", "") != "utf8" \
            and hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8")
    return sys.stdout


def output_file(path: str | Path, *, option: str | None = None) -> AtomicTextFile:
    """An :class:`AtomicTextFile` at ``path``, its missing folders made first; a wrong path is
    :func:`cannot_write`'s one-line :class:`InputError` (``option``: the option that named it)."""
    path = Path(path)
    folder = path.parent.absolute()
    missing = [d for d in (*folder.parents[::-1], folder) if not d.exists()]  # outermost first
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise cannot_write(path, e, option=option) from None
    try:
        out = AtomicTextFile(path, option=option)
    except BaseException:
        _remove_empty(missing)
        raise
    out.made_folders = missing
    return out


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (made in this order, each inside the one before), innermost first,
    while they are empty."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:
            break


def write_all(stream: TextIO, text: str) -> None:
    """Write ``text`` to ``stream`` whole, or raise (``BrokenPipeError`` when the reader went
    away). On a file descriptor the bytes go out with ``os.write`` until none is left: CPython's
    buffered writer takes a pipe's partial write (the reader left midway, ``| head -c 100``) as
    the end of the write and drops the rest without an error."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # a text-only stream (io.StringIO)
        stream.write(text)
        return
    try:
        stream.flush()
        view = memoryview(text.encode(stream.encoding or "utf-8"))
        while view:
            view = view[os.write(fd, view):]
    except OSError as e:  # named for the message (write_error_message): "stdout", or the file's path
        if isinstance(name := getattr(stream, "name", None), str):
            _named(e, "stdout" if name == "<stdout>" else name)
        raise


def write_text_atomically(path: str | Path, text: str) -> None:
    """``path`` holds ``text`` after this, or (when it fails) what it held before."""
    out = AtomicTextFile(path)
    try:
        out.file.write(text)
    except BaseException:
        out.discard()
        raise
    out.commit()
