"""One check that input is text (``streampunct.text.textfile``), for ``punctuate`` and ``caption``,
files and stdin, whole or arriving in pieces: the same decoding, the same refusal, the same message."""

from __future__ import annotations

import asyncio
import os
import queue
import random
import sys
import threading

import pytest

from streampunct.errors import InputError
from streampunct.text.textfile import TextStream, decode_text, text_lines

#: 3000 random bytes, as ``head -c 3000 /dev/urandom`` gives (with NUL bytes among them).
GARBAGE = random.Random(0).randbytes(3000)
#: Text-like bytes with too many control characters and no NUL.
CONTROLS = b"ab\x01\x02\x03\x04 " * 40

TEXTS = [
    b"so how are you\nfine, thanks\n",
    "caf\u00e9 na\u00efve \u2014 \U0001f355\n".encode(),  # multi-byte UTF-8, split anywhere
    b"\xef\xbb\xbf" + b"with a BOM\n",
    "utf-16 with a BOM\n".encode("utf-16"),
    "utf-16 little endian, no BOM\n".encode("utf-16-le"),
    "plain ascii then caf\u00e9 in Latin-1\n".encode("cp1252"),
    "caf\u00e9 in UTF-8, then ".encode() + "\u201cWindows\u201d caf\u00e9\n".encode("cp1252") + "na\u00efve\n".encode(),
    "ends inside a sequence caf\u00e9".encode()[:-1],  # a lead byte with no end: read as Windows-1252
    "\u00ab \u00c9T\u00c9\u00a0\u00bb ok\n".encode("cp1252"),  # Latin-1 whose "\u00c9\u00a0" is valid UTF-8
]


def test_a_latin1_file_reads_as_latin1_and_a_utf8_one_keeps_its_accents():
    latin1 = "\u00ab \u00c9T\u00c9\u00a0\u00bb ok\n"
    assert decode_text(latin1.encode("cp1252")) == latin1  # read byte by byte, "\u00c9\u00a0" would be "\u0260"
    mixed = "caf\u00e9 ".encode() + "\u201cquoted\u201d \u00c9T\u00c9\n".encode("cp1252")
    assert decode_text(mixed) == "caf\u00e9 \u201cquoted\u201d \u00c9T\u00c9\n"


def streamed(raw: bytes, step: int) -> str:
    stream = TextStream("stdin")
    return "".join(stream.feed(raw[i:i + step]) for i in range(0, len(raw), step)) + stream.close()


@pytest.mark.parametrize("raw", TEXTS)
@pytest.mark.parametrize("step", [1, 3, 7, 4096])
def test_text_in_pieces_decodes_as_the_whole_file(raw, step):
    assert streamed(raw, step) == decode_text(raw, "stdin")


def test_a_short_first_line_is_not_held_back():
    stream = TextStream("stdin")
    assert stream.feed(b"ok\n") == "ok\n"  # a live pipe's first line: out at once
    bom = TextStream("stdin")
    assert bom.feed(b"\xff\xfe") == ""  # UTF-16 or UTF-32: the next bytes tell
    assert bom.feed("ok".encode("utf-16-le")) == "ok"


def message(error: pytest.ExceptionInfo) -> str:
    return str(error.value)


@pytest.mark.parametrize("raw", [GARBAGE, CONTROLS, "hi\x00".encode("utf-16")], ids=["urandom", "controls", "nul"])
def test_binary_is_refused_with_the_same_message_whole_or_streamed(raw):
    assert b"\x00" in GARBAGE
    with pytest.raises(InputError) as whole:
        decode_text(raw, "stdin")
    with pytest.raises(InputError) as stream:
        streamed(raw, len(raw))
    assert message(stream) == message(whole)
    assert message(whole).startswith("stdin looks binary (") and message(whole).endswith(
        "; give a UTF-8 or UTF-16 text file")
    with pytest.raises(InputError, match=r"^stdin looks binary \("):  # in small pieces: refused as well
        streamed(raw, 5)


def test_text_lines_come_as_they_are_written_and_binary_stops_them():
    read, write = os.pipe()
    pipe = os.fdopen(read, encoding="utf-8")
    got: queue.Queue[str] = queue.Queue()

    def reader():
        try:
            for line in text_lines(pipe, "stdin"):
                got.put(line)
        except InputError as e:
            got.put(f"error: {e}")

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        os.write(write, "caf\u00e9 one\ntwo".encode())
        assert got.get(timeout=10) == "caf\u00e9 one\n"  # while the pipe is still open
        os.write(write, b" three\n")
        assert got.get(timeout=10) == "two three\n"
        os.write(write, b"four\n" + GARBAGE)  # the piece that holds binary data is refused whole
        assert got.get(timeout=10) == ("error: stdin looks binary (it holds NUL bytes); give a UTF-8 or UTF-16 "
                                       "text file")
    finally:
        os.close(write)
        thread.join(10)
        pipe.close()
    assert got.empty()


async def run(command: str, *args: str, stdin: bytes | None = None) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", command, *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await asyncio.wait_for(proc.communicate(stdin), 60)
    return proc.returncode, stderr.decode()


async def test_caption_and_punctuate_refuse_binary_stdin_alike(start_server):
    """``head -c 3000 /dev/urandom | streampunct caption -`` is refused as ``punctuate -`` refuses it."""
    server = await start_server()
    rc, punctuate = await run("punctuate", "-", stdin=GARBAGE)
    assert rc == 2
    rc, caption = await run("caption", "-", "--url", server.url, stdin=GARBAGE)
    assert rc == 2, caption
    assert punctuate.splitlines() == ["streampunct punctuate: error: stdin looks binary (it holds NUL bytes); "
                                      "give a UTF-8 or UTF-16 text file"]
    assert caption.splitlines() == [punctuate.strip().replace("streampunct punctuate:", "streampunct caption:")]
    assert not server.metrics.registry.get_sample_value("streampunct_words_in_total")  # no garbage was sent


async def test_caption_and_punctuate_refuse_a_binary_file_alike(tmp_path):
    source = tmp_path / "talk.bin"
    for payload in (GARBAGE, CONTROLS):
        source.write_bytes(payload)
        rc, punctuate = await run("punctuate", str(source))
        assert rc == 2 and f"{source} looks binary" in punctuate
        # refused before connecting: the server (nothing listens there) is never tried
        rc, caption = await run("caption", str(source), "--url", "ws://127.0.0.1:9/v1/stream")
        assert rc == 2
        assert caption.strip() == punctuate.strip().replace("streampunct punctuate:", "streampunct caption:")


# -- endless input: /dev/zero, a line that never ends ---------------------------------------------------------

def _lines_of(text: str) -> list[str]:
    return text.replace("\r", "\n").split("\n")


@pytest.mark.parametrize("seed", range(40))
def test_a_line_longer_than_the_limit_is_refused_wherever_the_pieces_cut(seed):
    from streampunct.text.textfile import BinaryCheck

    rng = random.Random(seed)
    limit = rng.randint(1, 12)
    text = "".join(rng.choice("ab\n\r") if rng.random() < 0.2 else "x" * rng.randint(1, 2 * limit)
                   for _ in range(rng.randint(1, 12)))
    too_long = max(map(len, _lines_of(text))) > limit
    for step in (1, 2, 5, len(text)):
        check = BinaryCheck("stdin", max_line=limit)
        if too_long:
            with pytest.raises(InputError, match=rf"^stdin has a line of more than {limit} characters \(no line end\)"):
                for i in range(0, len(text), step):
                    check.add(text[i:i + step])
        else:
            for i in range(0, len(text), step):
                check.add(text[i:i + step])


def test_read_text_refuses_an_endless_line_but_not_a_large_file_of_lines(tmp_path, monkeypatch):
    from streampunct.text import textfile

    monkeypatch.setattr(textfile, "MAX_LINE_CHARS", 1000)
    monkeypatch.setattr(textfile, "_READ_BYTES", 4096)  # many pieces: the limit holds across them
    lines = tmp_path / "lines.txt"
    lines.write_text(("w" * 999 + "\n") * 3000 + "y" * 1000)  # 3 MB, no line over the limit
    assert textfile.read_text(lines) == lines.read_text()
    one_line = tmp_path / "one-line.txt"
    one_line.write_text("w " * 2000)
    with pytest.raises(InputError, match=rf"^{one_line} has a line of more than 1,000 characters"):
        textfile.read_text(one_line)
    with pytest.raises(InputError, match="^x has a line of more than 1,000 characters"):
        decode_text(b"w\r" + b"w" * 1001, "x")  # a whole file: the same check


def _memory_cap() -> None:
    """In a child: at most 3 GB of address space, so that reading /dev/zero to its end fails fast."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


async def _run_capped(*args: str, stdin=asyncio.subprocess.DEVNULL, feed: bytes | None = None) -> tuple[int, str]:
    """A command in a child with :func:`_memory_cap`; ``feed`` is written to its stdin again and
    again until it exits (an endless pipe)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "streampunct.cli", *args, stdin=asyncio.subprocess.PIPE if feed else stdin,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, preexec_fn=_memory_cap,
        env={**os.environ, "OMP_NUM_THREADS": "1"})

    async def pump() -> None:
        assert proc.stdin is not None and feed is not None
        try:
            while True:
                proc.stdin.write(feed)
                await proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass

    pumping = asyncio.ensure_future(pump()) if feed else None
    try:
        assert proc.stderr is not None
        stderr = await asyncio.wait_for(proc.stderr.read(), 120)
        await asyncio.wait_for(proc.wait(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if pumping is not None:
            pumping.cancel()
    return proc.returncode, stderr.decode()


async def test_punctuate_and_caption_refuse_dev_zero_at_once(start_server):
    """``streampunct punctuate /dev/zero`` read without end (no newline ever comes): refused as binary,
    as a file, as stdin, as caption's input or lexicon, and as evaluate's data."""
    server = await start_server()
    binary = "/dev/zero looks binary (it holds NUL bytes); give a UTF-8 or UTF-16 text file"
    for args, said in ((["punctuate", "--engine", "fake", "/dev/zero"], binary),
                       (["caption", "/dev/zero", "--url", server.url], binary),
                       (["caption", "--lexicon", "/dev/zero", "x.txt", "--url", server.url],
                        f"argument --lexicon: {binary}"),
                       (["evaluate", "--engine", "fake", "--data", "/dev/zero"], binary)):  # a word/label file
        rc, err = await _run_capped(*args)
        assert (rc, err.strip().splitlines()[-1]) == (2, f"streampunct {args[0]}: error: {said}")
    with open("/dev/zero", "rb") as zero:
        for args in (["punctuate", "--engine", "fake", "-"], ["caption", "-", "--url", server.url]):
            rc, err = await _run_capped(*args, stdin=zero)
            assert (rc, err.strip().splitlines()[-1]) == (2, f"streampunct {args[0]}: error: stdin looks binary "
                                                             "(it holds NUL bytes); give a UTF-8 or UTF-16 text file")


async def test_punctuate_and_caption_refuse_a_line_without_end(start_server):
    """``yes word | tr -d '\\n' | streampunct punctuate``: refused once the line passes the limit."""
    from streampunct.text.textfile import MAX_LINE_CHARS

    server = await start_server()
    for args in (["punctuate", "--engine", "fake", "-"], ["caption", "-", "--url", server.url]):
        rc, err = await _run_capped(*args, feed=b"word " * 50_000)
        assert (rc, err.strip().splitlines()[-1]) == (2, f"streampunct {args[0]}: error: stdin has a line of more "
                                                         f"than {MAX_LINE_CHARS:,} characters (no line end); give a "
                                                         "text file with line ends")


def test_a_regular_file_is_accepted_or_refused_as_decode_text_does(tmp_path):
    """read_text decodes a regular file whole, as decode_text does: a BOM-less UTF-16 file is
    judged on all of it, not on its first piece (found in review, 2026-12-02: read in pieces,
    one of odd length, or one whose first MiB was ASCII and the rest CJK, was accepted)."""
    from streampunct.text import textfile

    cases = {"odd.txt": "hello world\n".encode("utf-16-le") + b"x",
             "late.txt": ("a" * (1 << 19) + "\u4e2d\u6587" * 1000).encode("utf-16-le"),
             "plain.txt": "so this is it\n".encode("utf-16-le")}
    for name, raw in cases.items():
        path = tmp_path / name
        path.write_bytes(raw)
        outcomes = []
        for read, arg in ((decode_text, raw), (textfile.read_text, path)):
            try:
                outcomes.append(read(arg) if read is textfile.read_text else read(arg, str(path)))
            except InputError as e:
                outcomes.append(f"InputError: {e}")
        assert outcomes[0] == outcomes[1], name


def test_text_lines_bound_a_line_that_ends_in_carriage_returns_only(monkeypatch):
    """text_lines ends lines at "\\n" alone: a stream of "\\r"-ended pieces is one line in
    progress, refused past the limit (found in review: it was held in memory without end)."""
    from streampunct.text import textfile

    monkeypatch.setattr(textfile, "MAX_LINE_CHARS", 1000)
    r, w = os.pipe()
    with os.fdopen(w, "wb") as f:
        f.write(b"word\r" * 400)
    with os.fdopen(r, "r") as stream, pytest.raises(
            InputError, match="^stdin has a line of more than 1,000 characters"):
        list(text_lines(stream))
