import importlib.util
import subprocess
import sys

import pytest

from streampunct.cli import COMMANDS, build_parser, main


def test_help_lists_only_present_subcommands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for name in COMMANDS:
        present = importlib.util.find_spec(f"streampunct.commands.{name}") is not None
        assert (name.replace("_", "-") in out) == present
    assert "punctuate" in out and "evaluate" in out


def test_help_does_not_import_torch():
    code = "import sys; from streampunct.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    "payload, message",
    [
        (b"", "no words in the input"),
        (b"?? -- !! ...", "no words in the input"),
        (b"\xff\xfe\x00", "no words in the input"),
    ],
)
def test_punctuate_bad_input_is_a_clear_error(tmp_path, capsys, payload, message):
    f = tmp_path / "in.txt"
    f.write_bytes(payload)
    assert main(["punctuate", str(f)]) == 2
    assert message in capsys.readouterr().err


def test_punctuate_missing_file_and_missing_model(tmp_path, capsys):
    assert main(["punctuate", str(tmp_path / "nope.txt")]) == 2
    assert "no such file" in capsys.readouterr().err
    f = tmp_path / "in.txt"
    f.write_text("hello there")
    assert main(["punctuate", str(f), "--model", str(tmp_path / "nomodel")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_transcript_reader_handles_labels_and_huge_words(tmp_path):
    from streampunct.commands.punctuate import read_transcript_words

    f = tmp_path / "wl"
    f.write_text("hello\tCOMMA\nworld\tPERIOD\n")
    assert read_transcript_words(str(f)) == ["hello", "world"]
    f.write_bytes(b"caf\xe9 " + b"x" * 100_000 + b" end")
    words = read_transcript_words(str(f))
    assert words[0] == "caf" and len(words[1]) == 100 and words[2] == "end"


def test_parser_builds():
    assert build_parser().prog == "streampunct"


@pytest.mark.parametrize(
    "encoding, bom",
    [("utf-8", b""), ("utf-8", b"\xef\xbb\xbf"), ("utf-16-le", b"\xff\xfe"), ("utf-16-be", b"\xfe\xff"),
     ("utf-32-le", b"\xff\xfe\x00\x00")],
)
def test_transcript_reader_decodes_by_byte_order_mark(tmp_path, encoding, bom):
    from streampunct.commands.punctuate import read_transcript_lines

    f = tmp_path / "in.txt"
    f.write_bytes(bom + "Caf\u00e9 au lait,\r\nna\u00efve?\n\nDone.\n".encode(encoding))
    assert read_transcript_lines(str(f)) == [["caf\u00e9", "au", "lait"], ["na\u00efve"], [], ["done"]]


@pytest.mark.parametrize(
    "payload",
    [b"hello\x00world", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "hi\x00".encode("utf-16")],
)
def test_punctuate_refuses_binary_input(tmp_path, capsys, payload):
    f = tmp_path / "in.bin"
    f.write_bytes(payload)
    assert main(["punctuate", str(f)]) == 2
    err = capsys.readouterr().err
    assert "looks binary" in err and len(err.strip().splitlines()) == 1


def test_punctuate_lines_keeps_line_and_paragraph_breaks():
    from streampunct.commands.punctuate import punctuate_lines
    from streampunct.labels import COMMA, PERIOD, O

    class LastWordEndsSentence:
        calls: list[list[str]] = []

        def punctuate(self, words):
            self.calls.append(list(words))
            return [O] * (len(words) - 1) + [PERIOD if len(words) > 2 else COMMA]

    fake = LastWordEndsSentence()
    segments = [["so", "here", "we", "are"], ["and", "then"], ["it", "goes"], [], ["new", "paragraph", "here"]]
    assert punctuate_lines(segments, fake, capitalize=True) == [
        "So here we are.", "And then,", "it goes,", "", "New paragraph here.",
    ]
    assert fake.calls == [s for s in segments if s]  # each line is its own segment


def test_punctuate_command_keeps_lines_with_the_shipped_model(tmp_path, capsys):
    from pathlib import Path

    model = Path(__file__).resolve().parents[2] / "models" / "default" / "streampunct.json"
    if not model.is_file():
        pytest.skip(f"needs the shipped model ({model})")
    f = tmp_path / "in.txt"
    f.write_bytes(b"\xef\xbb\xbfhello how are you today\ni am fine thank you\n\nsee you tomorrow then\n")
    assert main(["punctuate", str(f)]) == 0
    lines = capsys.readouterr().out.split("\n")
    assert len(lines) == 5 and lines[2] == "" and lines[4] == ""
    stripped = [line.replace(",", "").replace(".", "").replace("?", "") for line in lines]
    assert stripped == ["hello how are you today", "i am fine thank you", "", "see you tomorrow then", ""]
