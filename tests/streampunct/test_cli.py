import os
import subprocess
import sys
import types
from importlib.metadata import EntryPoint

import pytest

from streampunct import cli
from streampunct.cli import COMMANDS, ENTRY_POINT_GROUP, build_parser, main


def _subcommands(parser) -> list[str]:
    sub = next(a for a in parser._actions if a.dest == "command")
    return list(sub.choices)


def test_runtime_commands_first_then_registered_plugins():
    names = _subcommands(build_parser())
    assert names[: len(COMMANDS)] == list(COMMANDS)
    # training and benchmarks register themselves through pyproject.toml's entry points.
    assert names[len(COMMANDS):] == ["bench", "build-engine", "train"]


def test_plugins_come_from_the_entry_point_group(monkeypatch, caplog):
    plugin = types.ModuleType("fake_plugin")
    plugin.NAME, plugin.HELP = "hello", "say hello"
    plugin.add_arguments = lambda p: p.add_argument("--who", default="world")
    plugin.run = lambda args: print(f"hello {args.who}") or 0
    eps = [
        EntryPoint("hello", "fake_plugin", ENTRY_POINT_GROUP),
        EntryPoint("broken", "fake_plugin:no_such_attribute", ENTRY_POINT_GROUP),
        EntryPoint("serve", "fake_plugin", ENTRY_POINT_GROUP),
    ]
    monkeypatch.setitem(sys.modules, "fake_plugin", plugin)
    monkeypatch.setattr(cli, "entry_points", lambda group: eps if group == ENTRY_POINT_GROUP else [])
    assert _subcommands(build_parser()) == [*COMMANDS, "hello"]
    assert "broken" in caplog.text and "shadows a runtime subcommand" in caplog.text
    assert main(["hello", "--who", "you"]) == 0


def test_a_stop_signal_a_command_ignores_stays_ignored_after_it_returns(monkeypatch):
    """``serve`` ignores late stop signals once one stopped it (it exits next); the CLI's
    restoring of the signals it found must not undo that, or a late SIGTERM kills the exit. Called
    in-process with its arguments, the caller goes on: its handlers are put back."""
    import signal

    plugin = types.ModuleType("fake_server")
    plugin.NAME, plugin.HELP = "stopper", "ignore SIGTERM as a stopped server does"
    plugin.add_arguments = lambda p: None
    plugin.run = lambda args: signal.signal(signal.SIGTERM, signal.SIG_IGN) and 0
    monkeypatch.setitem(sys.modules, "fake_server", plugin)
    monkeypatch.setattr(cli, "entry_points", lambda group: [EntryPoint("stopper", "fake_server", ENTRY_POINT_GROUP)]
                        if group == ENTRY_POINT_GROUP else [])
    before = signal.getsignal(signal.SIGTERM)
    try:
        monkeypatch.setattr(sys, "argv", ["streampunct", "stopper"])
        assert main() == 0  # the process's own command line: it exits next
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        signal.signal(signal.SIGTERM, before)
        assert main(["stopper"]) == 0  # in-process (argv given): the caller goes on, its handler back
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGTERM, before)


@pytest.mark.parametrize(("name", "install"), [("train", "pip install '.[train]'"), ("bench", "pip install .")])
def test_a_plugin_whose_package_is_not_installed_says_so_when_run(monkeypatch, caplog, capsys, name, install):
    """An image with the runtime alone (docs/deploy.md, "Container recipe"): no warning on every
    command; the subcommand is listed as missing and says what to install (the train extra only
    for the commands that need it)."""
    eps = [EntryPoint(name, "no_such_package_here.cli", ENTRY_POINT_GROUP)]
    monkeypatch.setattr(cli, "entry_points", lambda group: eps if group == ENTRY_POINT_GROUP else [])
    caplog.set_level("INFO")
    parser = build_parser()
    assert _subcommands(parser) == [*COMMANDS, name] and "unavailable" not in caplog.text
    assert "'no_such_package_here' package is missing" in " ".join(parser.format_help().split())
    assert main([name, "--config", "x.toml", "--resume"]) == 2
    assert capsys.readouterr().err == (
        f"streampunct {name}: error: not in this install (the 'no_such_package_here' package is missing): "
        f"install streampunct from a source checkout with {install}\n")


@pytest.mark.parametrize("where", ["input", "out"])
def test_a_name_too_long_or_a_loop_of_links_is_one_line(tmp_path, capsys, where):
    source = tmp_path / "t.txt"
    source.write_text("hello there\n", encoding="utf-8")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    bad = tmp_path / ("\u5b57" * 90 + ".txt") if where == "input" else tmp_path / "loop"
    argv = ["punctuate", str(bad)] if where == "input" else ["punctuate", str(source), "--out", str(bad)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("streampunct punctuate: error: [Errno ") and err.count("\n") == 1


def test_help_imports_neither_torch_nor_training_code():
    code = ("import sys; from streampunct.cli import build_parser; build_parser(); "
            "print('torch' in sys.modules, 'training.checkpoint' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"


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


@pytest.mark.parametrize("command", ["punctuate", "serve"])
def test_a_missing_model_from_streampunct_model_names_the_variable(tmp_path, command):
    """$STREAMPUNCT_MODEL replaces the shipped default: a folder it names that does not exist is
    blamed on it, not on the shipped model."""
    env = {**os.environ, "STREAMPUNCT_MODEL": str(tmp_path / "gone")}
    args = {"punctuate": ["punctuate", "-"], "serve": ["serve", "--port", "0"]}[command]
    done = subprocess.run([sys.executable, "-m", "streampunct.cli", *args], input="hello there", env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().endswith(f"error: model folder {tmp_path / 'gone'} does not exist "
                                        "(from STREAMPUNCT_MODEL; unset it for the shipped model)")


def test_transcript_reader_handles_labels_and_huge_words(tmp_path, caplog):
    from streampunct.commands.punctuate import read_transcript_words

    f = tmp_path / "wl"
    f.write_text("hello\tCOMMA\nworld\tPERIOD\n")
    assert read_transcript_words(str(f)) == ["hello", "world"]
    f.write_bytes(b"caf\xe9 " + b"x" * 100_000 + b" end")
    words = read_transcript_words(str(f))
    assert words[0] == "caf\u00e9" and len(words[1]) == 100 and words[2] == "end"  # Latin-1, read as such
    assert "1 word(s) reached the 100-character limit; a longer word is cut to it (the first: xxxx" in caplog.text


@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_byte_order_mark_is_read_as_utf16(tmp_path, encoding):
    from streampunct.commands.punctuate import read_transcript_lines

    f = tmp_path / "in.txt"
    f.write_bytes("Caf\u00e9 au lait,\nna\u00efve?\n".encode(encoding))
    assert read_transcript_lines(str(f)) == [["caf\u00e9", "au", "lait"], ["na\u00efve"]]


def test_a_latin1_file_keeps_its_accents_and_says_how_it_was_read(tmp_path, caplog):
    from streampunct.commands.punctuate import read_transcript_lines

    f = tmp_path / "in.txt"
    f.write_bytes("na\u00efve caf\u00e9 \u201cquoted\u201d\n".encode("cp1252"))
    with caplog.at_level("WARNING", logger="streampunct.text.textfile"):
        assert read_transcript_lines(str(f)) == [["na\u00efve", "caf\u00e9", "quoted"]]
    assert f"{f} is not UTF-8 (byte 0xef at offset 2): read as Windows-1252 (Latin-1)" in caplog.text


def test_a_utf8_file_with_pasted_windows_quotes_keeps_its_utf8_accents(tmp_path, caplog):
    # one Windows smart-quote pair used to turn every UTF-8 accent of the file into mojibake
    from streampunct.commands.punctuate import read_transcript_lines

    f = tmp_path / "in.txt"
    f.write_bytes("na\u00efve caf\u00e9 r\u00e9sum\u00e9\n".encode() + b"line two \x93quoted\x94 caf\xc3\xa9\n")
    with caplog.at_level("WARNING", logger="streampunct.text.textfile"):
        assert read_transcript_lines(str(f)) == [["na\u00efve", "caf\u00e9", "r\u00e9sum\u00e9"],
                                                 ["line", "two", "quoted", "caf\u00e9"]]
    assert caplog.text.count("is not UTF-8 (byte 0x93 at offset 31): such bytes read as Windows-1252") == 1


def test_parser_builds():
    assert build_parser().prog == "streampunct"


@pytest.mark.parametrize("argv, unknown", [
    (["punctuate", "t.txt", "--bogus"], "--bogus"),
    (["punctuate", "--bogus=1", "t.txt"], "--bogus=1"),
    (["punctuate", "a.txt", "b.txt"], "b.txt"),
    (["evaluate", "--data", "d.jsonl", "--live-bogus"], "--live-bogus"),
])
def test_a_subcommands_unknown_arguments_are_reported_by_the_subcommand(capsys, argv, unknown):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: streampunct {argv[0]} [-h]")
    assert err.rstrip().splitlines()[-1] == f"streampunct {argv[0]}: error: unrecognized arguments: {unknown}"


def test_unknown_arguments_before_the_subcommand_are_the_top_levels(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--bogus", "punctuate", "t.txt"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: streampunct [-h] [--version]")
    assert err.rstrip().splitlines()[-1] == "streampunct: error: unrecognized arguments: --bogus"


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
        has_case = False  # as Punctuator.has_case: no truecasing head

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


def test_punctuate_ends_the_text_with_a_sentence_mark(tmp_path, capsys):
    """With the shipped model: ``name`` alone is O, but its question logit beats its period one."""
    from streampunct.model import DEFAULT_MODEL_DIR

    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL_DIR}")
    f = tmp_path / "in.txt"
    f.write_text("what is your name\n")
    assert main(["punctuate", str(f), "--capitalize"]) == 0
    assert capsys.readouterr().out == "What is your name?\n"



def test_evaluate_live_scores_a_chunked_stream_with_the_shipped_model(tmp_path, capsys):
    import json

    from streampunct.model import DEFAULT_MODEL_DIR

    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL_DIR}")
    text = ("so what do you think about that . i think it is great , really great . "
            "where do we go from here ? we go home . ") * 6
    f = tmp_path / "small.tsv"
    f.write_text("".join(f"{w}\t{ {'.': 'PERIOD', ',': 'COMMA', '?': 'QUESTION'}.get(n, 'O') }\n"
                         for w, n in zip(text.split(), text.split()[1:] + ["x"], strict=True)
                         if w not in ".,?"))
    out = tmp_path / "r.json"
    assert main(["evaluate", "--data", str(f), "--live", "--live-right-context", "1", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "live (chunks of 1-4 words at 2.5 words/s, right_context 1, max_delay_ms 2000)" in printed
    result = json.loads(out.read_text())
    assert result["live"]["right_context"] == 1 and result["live"]["n_words"] == result["n_words"]
    assert 0 <= result["live"]["overall_f1"] <= 100


def test_evaluate_refuses_zero_workers(tmp_path, capsys):
    f = tmp_path / "w.tsv"
    f.write_text("hello\tO\nworld\tPERIOD\n")
    with pytest.raises(SystemExit) as exit_:  # a usage error, before anything is read
        main(["evaluate", "--data", str(f), "--right-context", "0", "--workers", "0"])
    assert exit_.value.code == 2
    assert "argument --workers: must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value, message", [
    ("--live-right-context", "1001", "must be between 0 and 1000, got 1001"),
    ("--live-max-delay-ms", "600001", "must be between 0 and 600000, got 600001"),
])
def test_evaluate_refuses_live_options_a_server_refuses(tmp_path, capsys, flag, value, message):
    f = tmp_path / "w.tsv"
    f.write_text("hello\tO\nworld\tPERIOD\n")
    with pytest.raises(SystemExit) as exit_:  # a server answers such a config with bad_request
        main(["evaluate", "--data", str(f), "--live", flag, value])
    assert exit_.value.code == 2
    assert f"argument {flag}: {message}" in capsys.readouterr().err


def test_evaluate_and_bench_live_refuse_data_without_words(tmp_path, capsys):
    f = tmp_path / "empty.tsv"
    f.write_text("\n\n")
    assert main(["evaluate", "--data", str(f)]) == 2
    assert f"{f}: no words to score" in capsys.readouterr().err
    from benchmarks.live_bench import LiveBenchConfig, read_live_data
    from streampunct.errors import InputError

    with pytest.raises(InputError, match="no words to stream"):
        read_live_data(LiveBenchConfig(data=str(f)))


def test_evaluate_streams_with_engine_workers(tmp_path, capsys):
    import json

    from streampunct.model import DEFAULT_MODEL_DIR

    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL_DIR}")
    text = "so what do you think about that . i think it is great , really . where do we go ? home . " * 4
    f = tmp_path / "small.tsv"
    f.write_text("".join(f"{w}\t{ {'.': 'PERIOD', ',': 'COMMA', '?': 'QUESTION'}.get(n, 'O') }\n"
                         for w, n in zip(text.split(), text.split()[1:] + ["x"], strict=True)
                         if w not in ".,?"))
    results = {}
    for workers in ("1", "2"):
        out = tmp_path / f"r{workers}.json"
        assert main(["evaluate", "--data", str(f), "--right-context", "0", "3", "--workers", workers,
                     "--json", str(out)]) == 0
        results[workers] = json.loads(out.read_text())
    assert "(2 engine workers)" in capsys.readouterr().out
    assert results["1"]["workers"] == 1 and results["2"]["workers"] == 2
    assert results["1"]["streaming"] == results["2"]["streaming"]
    assert results["1"]["offline"]["overall_f1"] == results["2"]["offline"]["overall_f1"]


def test_serve_engine_workers_option(monkeypatch):
    import argparse

    from streampunct.commands import serve

    p = argparse.ArgumentParser()
    serve.add_arguments(p)
    monkeypatch.setattr("engines.ort_engine.physical_cores", lambda: 6)
    assert serve.build_config(p.parse_args([])).batching.engine_workers == 6  # auto, onnxruntime
    assert serve.build_config(p.parse_args(["--engine", "tensorrt"])).batching.engine_workers == 1
    assert serve.build_config(p.parse_args(["--engine-workers", "3"])).batching.engine_workers == 3
    monkeypatch.setattr("engines.ort_engine.physical_cores", lambda: 64)
    assert serve.build_config(p.parse_args([])).batching.engine_workers == serve.AUTO_MAX_ENGINE_WORKERS == 8
    for bad in ("0", "-2", "two"):
        with pytest.raises(SystemExit):
            p.parse_args(["--engine-workers", bad])


def test_serve_batch_rows_option():
    import argparse

    from streampunct.commands import serve

    p = argparse.ArgumentParser()
    serve.add_arguments(p)
    assert serve.build_config(p.parse_args([])).batching.batch_rows == "exact"
    for mode in ("padded", "alone"):
        assert serve.build_config(p.parse_args(["--batch-rows", mode])).batching.batch_rows == mode
    with pytest.raises(SystemExit):
        p.parse_args(["--batch-rows", "sometimes"])


# -- CLI audit: one-line errors, flags checked before any work --------------------------


def _fails_as_usage(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("command", [["punctuate", "in.txt"], ["evaluate", "--data", "in.txt"]])
def test_unknown_engine_is_a_usage_error(command, capsys):
    assert "invalid choice: 'foo'" in _fails_as_usage([*command, "--engine", "foo"], capsys)


def test_engine_errors_are_one_line(capsys):
    from engines.base import DependencyMissing

    def run(args):
        raise DependencyMissing("the tensorrt engine backend needs tensorrt")

    assert cli.run_command(run, None, "streampunct punctuate") == 2
    assert capsys.readouterr().err == "streampunct punctuate: error: the tensorrt engine backend needs tensorrt\n"


def test_a_wrong_path_is_one_line_and_a_machine_fault_keeps_its_traceback(capsys):
    def missing(args):
        raise FileNotFoundError(2, "No such file or directory", "out/x.json")

    assert cli.run_command(missing, None, "streampunct evaluate") == 2
    assert capsys.readouterr().err == (
        "streampunct evaluate: error: [Errno 2] No such file or directory: 'out/x.json'\n")

    def disk_full(args):
        raise OSError(28, "No space left on device", "out/x.json")

    assert cli.run_command(disk_full, None, "streampunct evaluate") == 1
    assert capsys.readouterr().err == "streampunct evaluate: error: cannot write out/x.json: No space left on device\n"

    def unnamed(args):  # a file's write that names no file (close() on a full disk): not stdout's
        raise OSError(28, "No space left on device")

    assert cli.run_command(unnamed, None, "streampunct train") == 1
    assert capsys.readouterr().err == "streampunct train: error: cannot write: No space left on device\n"

    def io_error(args):  # a fault of the machine that is not a refused write: its traceback
        raise OSError(5, "Input/output error")

    with pytest.raises(OSError, match="Input/output error"):
        cli.run_command(io_error, None, "streampunct evaluate")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_under_the_output_is_one_line_and_status_1(tmp_path):
    """``> /dev/full`` or ``--out /dev/full``: what a full disk does, said in one line (no
    traceback), status 1."""
    source = tmp_path / "t.txt"
    source.write_text("hello how are you i am fine\n", encoding="utf-8")
    command = [sys.executable, "-m", "streampunct.cli", "punctuate", str(source)]
    with open("/dev/full", "w") as full:
        proc = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (1, "streampunct punctuate: error: cannot write stdout: "
                                                 "No space left on device\n")
    proc = subprocess.run([*command, "--out", "/dev/full"], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stderr) == (1, "streampunct punctuate: error: cannot write /dev/full: "
                                                 "No space left on device\n")


def test_an_out_file_over_the_file_size_limit_stays_as_it_was(tmp_path):
    """A file-size limit (``ulimit -f``) stops the write of ``--out``: the file keeps what it held,
    no temporary file is left beside it, and the error names it in one line."""
    resource = pytest.importorskip("resource")
    source = tmp_path / "t.txt"
    source.write_text("hello how are you i am fine " * 400 + "\n", encoding="utf-8")
    out = tmp_path / "out" / "t.txt"
    out.parent.mkdir()
    out.write_text("old\n", encoding="utf-8")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    proc = subprocess.run([sys.executable, "-m", "streampunct.cli", "punctuate", str(source), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, preexec_fn=limit)
    assert (proc.returncode, proc.stderr) == (1, f"streampunct punctuate: error: cannot write {out}: File too large\n")
    assert out.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in out.parent.iterdir()] == ["t.txt"]


def test_a_closed_output_pipe_ends_the_command_quietly():
    import subprocess
    import sys

    # `streampunct ... | head -c 1`: the reader goes away; no traceback, status 141 (SIGPIPE)
    script = ("import sys\nfrom streampunct import cli\n"
              "def run(args):\n    for _ in range(100000):\n        print('x' * 100)\n"
              "sys.exit(cli.run_command(run, None, 'streampunct punctuate'))\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(1)
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""


def test_punctuate_capitalize_help_mentions_the_learned_case(capsys):
    with pytest.raises(SystemExit):
        main(["punctuate", "--help"])
    assert "truecasing head" in " ".join(capsys.readouterr().out.split())


def _serve_parser():
    import argparse

    from streampunct.commands import serve

    p = argparse.ArgumentParser(prog="streampunct serve")
    serve.add_arguments(p)
    return p


@pytest.mark.parametrize("port", ["-1", "70000", "x"])
def test_serve_refuses_ports_out_of_range(port, capsys):
    with pytest.raises(SystemExit) as exc:
        _serve_parser().parse_args(["--port", port])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "argument --port:" in err and "between 0 and 65535" in err
    assert _serve_parser().parse_args(["--port", "0"]).port == 0


@pytest.mark.parametrize("argv, message", [
    (["--send-timeout-s", "-1"], "--send-timeout-s must be >= 0 (0: no timeout)"),
    (["--idle-timeout-s", "-1"], "--idle-timeout-s must be >= 0 (0: never)"),
    (["--worker-hang-timeout-s", "0.5"], "--worker-hang-timeout-s must be at least 1, or 0: never"),
    (["--max-batch", "0"], "--max-batch must be an integer >= 1, not 0"),
    (["--max-wait-ms", "-1"], "--max-wait-ms must be >= 0"),
    (["--max-sessions", "0"], "--max-sessions must be an integer >= 1, not 0"),
    (["--max-message-bytes", "10"], "--max-message-bytes must be an integer >= 1024, not 10"),
])
def test_serve_config_errors_name_the_flags(argv, message):
    from streampunct.commands import serve
    from streampunct.errors import InputError

    with pytest.raises(InputError) as exc:
        serve.build_config(_serve_parser().parse_args(argv))
    assert str(exc.value) == message


@pytest.mark.parametrize("argv, message", [
    (["--max-wait-ms", "nan"], "argument --max-wait-ms: must be finite (not nan or inf), got nan"),
    (["--max-wait-ms", "inf"], "argument --max-wait-ms: must be finite (not nan or inf), got inf"),
    (["--send-timeout-s", "nan"], "argument --send-timeout-s: must be finite (not nan or inf), got nan"),
    (["--send-timeout-s=-inf"], "argument --send-timeout-s: must be finite (not nan or inf), got -inf"),
    (["--engine-option", "batch_ms=nan"], "argument --engine-option: expected a finite number in 'batch_ms=nan'"),
])
def test_serve_refuses_non_finite_numbers_as_usage_errors(argv, message, capsys, monkeypatch):
    from streampunct.commands import serve

    monkeypatch.setattr(serve, "run", lambda args: pytest.fail("the server started"))
    assert _fails_as_usage(["serve", "--engine", "fake", "--port", "0", *argv], capsys).endswith(message)


def test_serve_engine_options_take_the_backends_types():
    """``--engine-option`` text is converted by the backend's option types, not guessed before:
    ``providers=X`` is a one-item list, triton's ``model_version=1`` the string "1"."""
    from engines.base import make_options
    from engines.fake import FakeOptions
    from engines.ort_engine import OrtOptions
    from engines.triton_engine import TritonOptions

    def options(*pairs):
        argv = ["--engine", "fake"] + [a for pair in pairs for a in ("--engine-option", pair)]
        return dict(_serve_parser().parse_args(argv).engine_option)

    ort = make_options(OrtOptions, options("providers=CPUExecutionProvider", "intra_op_threads=2"), "onnxruntime")
    assert ort.providers == ("CPUExecutionProvider",) and ort.intra_op_threads == 2
    triton = make_options(TritonOptions, options("model_version=1", "url=h:8001", "verify=false"), "triton")
    assert (triton.model_version, triton.url, triton.verify) == ("1", "h:8001", False)
    fake = make_options(FakeOptions, options("batch_ms=2", "has_case=true"), "fake")
    assert fake.batch_ms == 2.0 and fake.has_case is True


def test_serve_float_options_all_refuse_non_finite_values():
    """Every float option of ``serve`` is parsed by a type that refuses nan and inf (none is a plain float)."""
    for action in _serve_parser()._actions:
        assert action.type is not float, f"{action.option_strings} takes nan and inf"


def test_serve_send_timeout_zero_means_none():
    from streampunct.commands import serve

    assert serve.build_config(_serve_parser().parse_args(["--send-timeout-s", "0"])).send_timeout_s is None


def test_serve_idle_timeout_is_off_by_default_and_taken_in_seconds():
    from streampunct.commands import serve

    assert serve.build_config(_serve_parser().parse_args([])).idle_timeout_s is None
    assert serve.build_config(_serve_parser().parse_args(["--idle-timeout-s", "0"])).idle_timeout_s is None
    assert serve.build_config(_serve_parser().parse_args(["--idle-timeout-s", "90"])).idle_timeout_s == 90.0


def test_stream_cache_auto_is_off_for_other_engines(tmp_path):
    import json

    from streampunct.errors import ModelError
    from streampunct.model import load_model_info
    from streampunct.server.app import ServerConfig, _stream_shape

    (tmp_path / "streampunct.json").write_text(json.dumps({"stream_artifact": "model.stream.int8.onnx"}))
    info = load_model_info(tmp_path)
    assert info.stream_cache_auto
    assert _stream_shape(ServerConfig(engine="tensorrt"), info) is None
    with pytest.raises(ModelError, match=r"--stream-cache on needs an engine that runs a streaming graph "
                                         r"\(onnxruntime, torch\), not tensorrt"):
        _stream_shape(ServerConfig(engine="tensorrt", stream_cache="on"), info)


@pytest.mark.parametrize("argv, message", [
    (["--right-context", "-1"], "argument --right-context: must be >= 0, got -1"),
    (["--live-right-context", "-1"], "argument --live-right-context: must be between 0 and 1000, got -1"),
    (["--live-max-delay-ms", "-5"], "argument --live-max-delay-ms: must be between 0 and 600000, got -5"),
    (["--batch-size", "0"], "argument --batch-size: must be >= 1, got 0"),
])
def test_evaluate_refuses_negative_options_as_usage_errors(argv, message, capsys):
    assert message in _fails_as_usage(["evaluate", "--data", "x.tsv", *argv], capsys)


@pytest.mark.parametrize("window, message", [
    ("0 0 0", "window size must be >= 1"),
    ("10 20 30", "window size 10 is too small for left=20, right=30"),
    ("600 40 20", "window size 600 is too large: the model sees size + 2 tokens and has 512 positions"),
])
def test_evaluate_refuses_bad_windows_before_any_work(window, message, tmp_path, capsys, monkeypatch):
    import json

    from streampunct.text import word_labels

    model = tmp_path / "model"
    model.mkdir()
    (model / "streampunct.json").write_text(json.dumps({"max_word_tokens": 16}))
    f = tmp_path / "w.tsv"
    f.write_text("hello\tO\nworld\tPERIOD\n")
    monkeypatch.setattr(word_labels, "read_word_labels", lambda *a, **k: pytest.fail("read the data first"))
    assert main(["evaluate", "--data", str(f), "--model", str(model), "--window", *window.split()]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"streampunct evaluate: error: --window {window}: {message}")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("wps, why", [("0", "must be > 0"), ("-1", "must be > 0"),
                                      ("nan", "must be a finite number > 0"), ("inf", "must be a finite number > 0")])
def test_bench_accuracy_refuses_a_speech_rate_that_is_not_positive(wps, why, capsys):
    assert f"argument --wps: {why}, got {wps}" in _fails_as_usage(["bench", "accuracy", "--data", "x", "--wps", wps],
                                                                  capsys)


@pytest.mark.parametrize("argv", [["punctuate", "{dir}"], ["caption", "{dir}"], ["evaluate", "--data", "{dir}"],
                                  ["evaluate", "--text", "--data", "{dir}"]])
def test_a_directory_given_for_a_file_is_named_as_such(argv, tmp_path, capsys):
    assert main([a.format(dir=tmp_path) for a in argv]) == 2
    assert capsys.readouterr().err.endswith(f"error: {tmp_path} is a directory, not a file\n")


def test_a_file_given_for_the_model_folder_is_named_as_such(tmp_path, capsys):
    f = tmp_path / "in.txt"
    f.write_text("hello there")
    assert main(["punctuate", str(f), "--model", str(f)]) == 2
    assert f"model folder {f} is not a folder" in capsys.readouterr().err


def test_every_bench_accuracy_option_is_described():
    bench = next(a for a in build_parser()._actions if a.dest == "command").choices["bench"]
    accuracy = next(a for a in bench._actions if a.dest == "bench").choices["accuracy"]
    undescribed = [a.option_strings[0] for a in accuracy._actions if a.option_strings and not a.help]
    assert undescribed == []


@pytest.mark.parametrize(("argv", "level"), [
    (["punctuate", "t.txt"], "WARNING"),  # filters: their output is the product
    (["caption", "t.txt"], "WARNING"),
    (["serve"], "INFO"),
    (["--log-level", "INFO", "punctuate", "t.txt"], "INFO"),
    (["--log-level", "ERROR", "serve"], "ERROR"),
])
def test_each_command_logs_at_its_own_default_level_unless_told(monkeypatch, argv, level):
    import streampunct.cli as cli

    seen = []
    monkeypatch.setattr(cli, "configure_logging", seen.append)
    monkeypatch.setattr(cli, "run_command", lambda run, args, prog, **kw: 0)
    assert cli.main(argv) == 0
    assert seen == [level]



def test_tabbed_text_is_plain_text_unless_its_lines_are_word_tab_label(tmp_path):
    """A table with tabs is text (every word kept); a label file is read as one; a label file
    with a broken line is refused at that line, not read as text with its labels as words."""
    from streampunct.commands.punctuate import read_transcript_lines
    from streampunct.errors import InputError

    f = tmp_path / "in.tsv"
    f.write_text("Name\tSays\nAlice\thello how are you\n\tfine thanks\t\n")
    assert read_transcript_lines(str(f)) == [["name", "says"], ["alice", "hello", "how", "are", "you"],
                                             ["fine", "thanks"]]
    f.write_text("good\tO\nmorning\tCOMMA\n\nyou\tQUESTION\n")
    assert read_transcript_lines(str(f)) == [["good", "morning", "you"]]
    for broken, reason in [("how\n", "expected 'word<TAB>LABEL'"), ("how are\tO\n", "cannot hold a space"),
                           ("how\tX\tO\n", "expected one tab"), ("how\tMAYBE\n", "unknown label 'MAYBE'")]:
        f.write_text("good\tO\nmorning\tCOMMA\n" + broken + "you\tQUESTION\n")
        with pytest.raises(InputError, match=f"{f}:3: .*{reason}"):
            read_transcript_lines(str(f))


def test_word_label_files_are_decoded_as_transcripts_are(tmp_path):
    """UTF-16 and Latin-1 label files read as punctuate reads them (one owner of decoding)."""
    from streampunct.text.word_labels import read_word_labels

    f = tmp_path / "wl.tsv"
    text = "na\u00efve\tO\ncaf\u00e9\tPERIOD\n"
    for raw in (text.encode("utf-16"), text.encode("utf-16-le"), text.encode("cp1252"),
                b"\xef\xbb\xbf" + text.encode()):
        f.write_bytes(raw)
        data = read_word_labels(f)
        assert data.words == ["na\u00efve", "caf\u00e9"] and data.labels == [0, 2]


def test_punctuate_reads_pipes_and_refuses_a_closed_stdin(tmp_path):
    exe = [sys.executable, "-m", "streampunct.cli", "punctuate"]
    got = subprocess.run([*exe, "/dev/stdin"], input="hi there", capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout.strip().lower().startswith("hi there"), got.stderr
    closed = subprocess.run(" ".join(exe) + " - <&-", shell=True, capture_output=True, text=True)
    assert closed.returncode == 2 and "stdin is closed" in closed.stderr and "Traceback" not in closed.stderr


@pytest.mark.parametrize("fmt", ["auto", "vosk"])
def test_caption_refuses_a_closed_stdin_at_once(fmt):
    # it used to print a reader thread's traceback and then wait for ever
    command = (f"{sys.executable} -m streampunct.cli caption - --input-format {fmt} "
               "--url ws://127.0.0.1:9/v1/stream <&-")
    closed = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    assert closed.returncode == 2 and "Traceback" not in closed.stderr
    assert closed.stderr.strip() == "streampunct caption: error: stdin is closed: give a file, or pipe the text in"


def test_a_closed_stdin_is_an_error_for_the_line_reader():
    from streampunct.errors import InputError
    from streampunct.text.textfile import text_lines

    with pytest.raises(InputError, match="^stdin is closed: give a file, or pipe the text in$"):
        next(text_lines(None, "stdin"))


def _no_model(monkeypatch):
    """Fail the test if a command gets as far as loading a model."""
    from streampunct.core import decoder

    monkeypatch.setattr(decoder.OfflineDecoder, "from_model_dir",
                        classmethod(lambda cls, *a, **k: pytest.fail("the model was loaded")))


@pytest.mark.parametrize("break_", ["\f", "\v", "\x1c", "\x85", "\u2028", "\u2029"])
def test_punctuate_splits_lines_at_line_ends_only(tmp_path, break_):
    """A form feed (pdftotext's page break) and the other characters ``str.splitlines`` splits
    at sit inside a line: one segment a line of the file, as ``wc -l`` counts them."""
    from streampunct.commands.punctuate import read_transcript_lines

    f = tmp_path / "in.txt"
    f.write_text(f"hello how are you{break_}i am fine\r\nsecond line\rthird\n", encoding="utf-8")
    assert read_transcript_lines(str(f)) == [
        ["hello", "how", "are", "you", "i", "am", "fine"], ["second", "line"], ["third"]]


def test_line_files_split_at_line_ends_only(tmp_path):
    from streampunct.text.textfile import split_lines
    from streampunct.text.word_labels import read_word_labels
    from streampunct.text.written_form import parse_lexicon_tsv

    assert split_lines("a\fb\nc\r\nd\re\n") == ["a\fb", "c", "d", "e"]
    assert split_lines("a\n\n") == ["a", ""] and split_lines("") == []
    assert parse_lexicon_tsv("i phone\tiPhone\u2028x\n") == (("i phone", "iPhone x"),)  # one line
    f = tmp_path / "labels.tsv"
    f.write_text("hello\tCOMMA\nworld\u2028\tPERIOD\n", encoding="utf-8")
    assert read_word_labels(f).words == ["hello", "world"]


@pytest.mark.parametrize("where, message", [
    ("missing/deeper/out.txt", "cannot write {out}: no folder {tmp}/missing"),
    ("in.txt/out.txt", "cannot write {out}: {tmp}/in.txt is a file, not a folder"),
    (".", "{out} is a directory"),
])
def test_punctuate_checks_out_before_the_model_runs(tmp_path, capsys, monkeypatch, where, message):
    _no_model(monkeypatch)
    f = tmp_path / "in.txt"
    f.write_text("hello there\n")
    out = tmp_path / where
    assert main(["punctuate", str(f), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"streampunct punctuate: error: {message.format(out=out, tmp=tmp_path)}\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a read-only folder")
def test_an_out_folder_without_write_permission_is_named(tmp_path, capsys, monkeypatch):
    _no_model(monkeypatch)
    f = tmp_path / "in.txt"
    f.write_text("hello there\n")
    (tmp_path / "ro").mkdir(mode=0o555)
    assert main(["punctuate", str(f), "--out", str(tmp_path / "ro" / "o.txt")]) == 2
    assert capsys.readouterr().err.endswith(f"no permission to write in {tmp_path}/ro\n")


def test_evaluate_json_under_a_file_is_named_before_the_model_runs(tmp_path, capsys, monkeypatch):
    _no_model(monkeypatch)
    data = tmp_path / "d.tsv"
    data.write_text("hello\tO\nthere\tPERIOD\n")
    assert main(["evaluate", "--data", str(data), "--json", str(data / "x.json")]) == 2
    assert capsys.readouterr().err == (f"streampunct evaluate: error: cannot write {data}/x.json: {data} is a file, "
                                       "not a folder\n")


def test_punctuate_out_dash_is_stdout_and_out_is_written_utf8(tmp_path, capsys):
    from streampunct.model import DEFAULT_MODEL_DIR

    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip(f"no model at {DEFAULT_MODEL_DIR}")
    f = tmp_path / "in.txt"
    f.write_text("what is your name 🙂\n", encoding="utf-8")
    assert main(["punctuate", str(f), "--capitalize", "--out", "-"]) == 0
    assert capsys.readouterr().out == "What is your name? 🙂\n"
    assert not (tmp_path / "-").exists() and not list(tmp_path.glob("-"))


def test_punctuate_writes_utf8_whatever_the_locale_and_refuses_a_closed_stdout(tmp_path):
    exe = [sys.executable, "-m", "streampunct.cli", "punctuate"]
    env = {**__import__("os").environ, "PYTHONIOENCODING": "latin-1"}
    got = subprocess.run(exe, input="we love it 🙂 привет".encode(), capture_output=True, env=env)
    assert got.returncode == 0, got.stderr.decode()
    assert "🙂" in got.stdout.decode("utf-8") and "привет" in got.stdout.decode("utf-8")
    closed = subprocess.run(" ".join(exe) + " - >&-", shell=True, input="hi there", capture_output=True, text=True)
    assert closed.returncode == 2 and "stdout is closed" in closed.stderr and "Traceback" not in closed.stderr


def test_caption_refuses_out_dash_and_a_closed_stdout(tmp_path):
    f = tmp_path / "in.txt"
    f.write_text("hello there\n")
    exe = [sys.executable, "-m", "streampunct.cli", "caption", str(f), "--url", "ws://127.0.0.1:9/v1/stream"]
    dash = subprocess.run([*exe, "--out", "-"], capture_output=True, text=True)
    assert dash.returncode == 2 and "--out -" in dash.stderr and "Traceback" not in dash.stderr
    closed = subprocess.run(" ".join(exe) + " >&-", shell=True, capture_output=True, text=True)
    assert closed.returncode == 2 and "stdout is closed" in closed.stderr and "Traceback" not in closed.stderr


def test_evaluate_checks_json_before_the_model_runs(tmp_path, capsys, monkeypatch):
    _no_model(monkeypatch)
    f = tmp_path / "t.tsv"
    f.write_text("hello\tO\nworld\tPERIOD\n")
    assert main(["evaluate", "--data", str(f), "--json", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "is a directory" in err and "Traceback" not in err


def test_evaluate_text_refuses_a_word_label_file(tmp_path, capsys, monkeypatch):
    _no_model(monkeypatch)
    f = tmp_path / "t.tsv"
    f.write_text("hello\tO\nworld\tPERIOD\n")
    assert main(["evaluate", "--data", str(f), "--text"]) == 2
    assert "a word<TAB>LABEL file, not punctuated text" in capsys.readouterr().err


def test_evaluate_reads_its_data_from_stdin(capsys, monkeypatch):
    """``--data -`` reads stdin, as ``punctuate -`` and ``caption -`` do."""
    import io

    from streampunct.text.word_labels import read_punctuated_text, read_word_labels

    def stdin(text: str) -> None:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode())))

    stdin("hello\tO\nworld\tPERIOD\n")
    data = read_word_labels("-")
    assert data.words == ["hello", "world"] and data.source == "stdin"
    stdin("Hello, world.\n")
    assert read_punctuated_text("-").words == ["hello", "world"]
    _no_model(monkeypatch)
    stdin("hello\tO\nworld\tPERIOD\n")
    assert main(["evaluate", "--data", "-", "--text"]) == 2
    assert "stdin: a word<TAB>LABEL file, not punctuated text" in capsys.readouterr().err


def test_python_m_streampunct_is_the_command():
    import subprocess
    import sys

    import streampunct

    done = subprocess.run([sys.executable, "-m", "streampunct", "--version"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and streampunct.__version__ in done.stdout, done.stderr


def test_ctrl_c_while_the_commands_load_exits_130_without_a_traceback(monkeypatch, capsys):
    from streampunct import cli

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "available_commands", interrupted)
    assert cli.main(["punctuate", "-"]) == 130
    assert capsys.readouterr().err == ""


def test_evaluate_right_context_needs_a_value(capsys):
    from streampunct.cli import build_parser

    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["evaluate", "--right-context"])  # it ran no streaming, as if not given
    assert done.value.code == 2
    assert "argument --right-context: expected at least one argument" in capsys.readouterr().err
    assert build_parser().parse_args(["evaluate", "--data", "x.tsv"]).right_context == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads a pipe's fill level (Linux fcntl/ioctl)")
def test_write_all_hears_of_a_reader_gone_midway():
    """CPython's buffered writer takes a pipe's partial write as the whole (the reader of
    `punctuate big.txt | head -c 100` left midway): punctuate exited 0 and dropped the rest."""
    import io
    import os
    import threading

    from streampunct.text.textfile import write_all

    read_fd, write_fd = os.pipe()
    got: list[bytes] = []

    def reader():  # takes 100 bytes once the writer has filled the pipe, then goes away
        import fcntl
        import termios
        import time

        try:  # closed whatever happens: a writer left blocked on a full pipe would hang the test
            size = fcntl.fcntl(read_fd, 1032)  # F_GETPIPE_SZ
            deadline = time.monotonic() + 30
            while fcntl.ioctl(read_fd, termios.FIONREAD, b"\0\0\0\0") != size.to_bytes(4, sys.byteorder):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.001)
            got.append(os.read(read_fd, 100))
        finally:
            os.close(read_fd)

    stream = io.TextIOWrapper(io.FileIO(write_fd, "w"), encoding="utf-8")
    thread = threading.Thread(target=reader)
    thread.start()
    try:
        with pytest.raises(BrokenPipeError):
            write_all(stream, "x" * 400_000)
    finally:
        thread.join(30)
        try:
            stream.close()
        except BrokenPipeError:
            pass
    assert got == [b"x" * 100]
    out = io.StringIO()
    write_all(out, "all of it")  # a stream without a descriptor: written as it is
    assert out.getvalue() == "all of it"


def test_cannot_write_says_why_for_wrong_paths_and_keeps_other_faults(tmp_path):
    import errno

    from streampunct.errors import InputError
    from streampunct.text.textfile import cannot_write

    (tmp_path / "f").write_text("x")
    (tmp_path / "ro").mkdir()
    cases = {
        (tmp_path / "a" / "b" / "x.txt", errno.ENOENT): f"no folder {tmp_path}/a",
        (tmp_path / "f" / "b" / "x.txt", errno.ENOTDIR): f"{tmp_path}/f is a file, not a folder",
        (tmp_path / "ro" / "new" / "x.txt", errno.EACCES): f"no permission to write in {tmp_path}/ro",
    }
    for (path, code), why in cases.items():
        error = cannot_write(path, OSError(code, os.strerror(code)))
        assert isinstance(error, InputError) and str(error) == f"cannot write {path}: {why}"
    full = OSError(errno.ENOSPC, "No space left on device")
    assert cannot_write(tmp_path / "x.txt", full) is full  # a fault, not a wrong path: its traceback stays


def test_output_file_makes_its_folders_and_names_the_option_of_a_wrong_path(tmp_path):
    from streampunct.errors import InputError
    from streampunct.text.textfile import output_file

    out = output_file(tmp_path / "new" / "deeper" / "r.json", option="--json")
    out.file.write("{}\n")
    out.commit()
    assert (tmp_path / "new" / "deeper" / "r.json").read_text() == "{}\n"
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputError) as error:
        output_file(tmp_path / "f" / "r.json", option="--json")
    assert str(error.value) == f"cannot write --json {tmp_path}/f/r.json: {tmp_path}/f is a file, not a folder"


def test_a_discarded_output_file_leaves_no_folder_it_made(tmp_path):
    from streampunct.text.textfile import output_file

    (tmp_path / "kept").mkdir()
    out = output_file(tmp_path / "kept" / "new" / "deeper" / "r.json")
    out.file.write("{}\n")
    out.discard()
    assert [p.name for p in tmp_path.iterdir()] == ["kept"] and not list((tmp_path / "kept").iterdir())
    out = output_file(tmp_path / "kept" / "new" / "r.json")
    (tmp_path / "kept" / "new" / "other.txt").write_text("x")  # a file put there meanwhile: the folder stays
    out.discard()
    assert [p.name for p in (tmp_path / "kept" / "new").iterdir()] == ["other.txt"]
    with pytest.raises(OSError):  # the file cannot be made (a name too long): nothing made stays
        output_file(tmp_path / "kept" / "a" / "b" / ("x" * 300))
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["new"]


def test_with_stderr_closed_an_error_stays_out_of_the_output(tmp_path):
    """``cmd 2>&-``: Python's sys.stderr is None, and print(file=None) writes to stdout."""
    proc = subprocess.run([sys.executable, "-m", "streampunct", "punctuate", str(tmp_path / "nope.txt")],
                          stdout=subprocess.PIPE, preexec_fn=lambda: os.close(2), timeout=120)
    assert proc.returncode == 2 and proc.stdout == b""


def test_importing_the_cli_loads_no_numpy():
    """Until main() runs (and guards against Ctrl-C), the console script imports the CLI
    module only: numpy and the engines load inside main, so a Ctrl-C in the first moments
    exits 130 without a traceback, and `--help` starts fast."""
    import subprocess
    import sys

    code = "import sys, streampunct.cli; print(sorted(m for m in ('numpy', 'engines') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(("argv", "flag"), [(["--itn"], "--itn"), (["--itn-grammars", "on"], "--itn-grammars on")])
def test_serve_without_the_itn_extra_names_the_flag_that_needs_it(monkeypatch, argv, flag):
    import streampunct.text.itn as itn
    from streampunct.commands.serve import build_config
    from streampunct.errors import InputError

    monkeypatch.setattr(itn, "available", lambda: False)
    with pytest.raises(InputError) as e:
        build_config(build_parser().parse_args(["serve", *argv]))
    assert str(e.value) == (f"{flag} needs the itn extra: pip install -e '.[itn]' in the streampunct checkout "
                            "(pip install '.[itn]' where it is installed from a copy, as in a container)")


def _default_stop_signals() -> None:
    """In a child: the stop signals at their defaults, whatever the test runner's are (a job run
    in the background of a script ignores SIGINT, one under nohup SIGHUP, and children inherit it)."""
    import signal

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_stop_signal_mid_run_keeps_the_out_file_and_leaves_no_temporary_file(tmp_path, sig):
    """`timeout`, systemd and CI stop a job with SIGTERM; a closed terminal sends SIGHUP. Both
    killed punctuate at once before: status -15, and an empty hidden temporary file beside
    --out. Now they end it as Ctrl-C does: --out as it was, no temporary file, 128 + signal."""
    import signal
    import subprocess
    import time

    words = " ".join(f"word{i % 97}" for i in range(200_000))
    source = tmp_path / "big.txt"
    source.write_text(words + "\n")
    out = tmp_path / "big.out"
    out.write_text("the older output\n")
    proc = subprocess.Popen([sys.executable, "-m", "streampunct.cli", "punctuate", str(source), "--out", str(out),
                             "--engine", "fake"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_default_stop_signals)
    try:
        deadline = time.monotonic() + 60
        while not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]:  # its --out is open
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.01)
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + getattr(signal, sig), err.decode()
    assert b"Traceback" not in err
    assert out.read_text() == "the older output\n"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("command", ["punctuate", "evaluate"])
def test_punctuate_and_evaluate_pass_engine_options_to_the_backend(tmp_path, capsys, command):
    """As serve does: `--engine triton --engine-option url=HOST:PORT` could not be said before."""
    from streampunct.model import DEFAULT_MODEL_DIR

    if not (DEFAULT_MODEL_DIR / "streampunct.json").is_file():
        pytest.skip("no shipped model")
    words = tmp_path / "words.tsv"
    words.write_text("hello\tO\nworld\tPERIOD\n")
    text = tmp_path / "t.txt"
    text.write_text("hello world\n")
    source = [str(text)] if command == "punctuate" else ["--data", str(words)]
    assert main([command, *source, "--engine-option", "nokey=1"]) == 2
    assert capsys.readouterr().err.startswith(f"streampunct {command}: error: unknown option(s) nokey for the "
                                              "onnxruntime backend; valid: allow_spinning")


def test_evaluate_json_dash_is_refused_not_a_file_named_dash(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    words = tmp_path / "words.tsv"
    words.write_text("hello\tO\nworld\tPERIOD\n")
    assert main(["evaluate", "--data", str(words), "--json", "-"]) == 2
    assert capsys.readouterr().err.strip() == ("streampunct evaluate: error: --json -: the tables already go to "
                                               "stdout; --json names a file")
    assert not (tmp_path / "-").exists()


def test_evaluate_live_options_without_live_are_refused(tmp_path, capsys):
    """They were silently ignored: the run scored no live stream at all."""
    words = tmp_path / "words.tsv"
    words.write_text("hello\tO\nworld\tPERIOD\n")
    assert main(["evaluate", "--data", str(words), "--live-right-context", "8"]) == 2
    assert capsys.readouterr().err.strip() == ("streampunct evaluate: error: --live-right-context sets the live "
                                               "stream's options: add --live")


@pytest.mark.parametrize("argv", [
    ["punctuate", "--model", "", "in.txt"],
    ["serve", "--model", ""],
    ["evaluate", "--model", "", "--data", "x"],
    ["bench", "load", "--model", ""],
    ["bench", "itn", "--model", ""],
    ["bench", "engine", "--model", ""],
    ["build-engine", "--model", "", "--out", "x"],
])
def test_an_empty_model_folder_is_a_usage_error(argv, capsys):
    # --model "$UNSET" used to read the current folder as the model
    assert _fails_as_usage(argv, capsys).endswith("argument --model: expected a model folder, got an empty string")


@pytest.mark.parametrize("option", ["--right-context", "--max-delay-ms"])
def test_caption_refuses_a_negative_latency_option_before_connecting(option, capsys):
    """Like every other bad number, a usage error (status 2) before anything is sent, not the
    server's bad_request after connecting."""
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["caption", "talk.txt", option, "-1"])
    assert e.value.code == 2
    assert f"argument {option}: must be >= 0, got -1" in capsys.readouterr().err


def test_a_command_run_in_process_off_the_main_thread_returns_its_status():
    """Off the main thread no signal handler can be set: ``main(argv)`` there returns the command's
    status (found in review, 2026-12-02: putting the caller's handlers back raised ValueError)."""
    import argparse
    import threading

    from streampunct.cli import run_command

    got: list = []
    thread = threading.Thread(target=lambda: got.append(
        run_command(lambda args: 3, argparse.Namespace(), "x", own_process=False)))
    thread.start()
    thread.join(30)
    assert got == [3]
