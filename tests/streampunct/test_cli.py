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


def test_punctuate_ends_the_text_with_a_sentence_mark(tmp_path, capsys):
    """With the shipped model: ``name`` alone is O, but its question logit beats its period one."""
    from streampunct.model import DEFAULT_MODEL_DIR

    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL_DIR}")
    f = tmp_path / "in.txt"
    f.write_text("what is your name\n")
    assert main(["punctuate", str(f), "--capitalize"]) == 0
    assert capsys.readouterr().out == "What is your name?\n"

