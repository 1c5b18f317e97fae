"""Where the benches write: the result folder is checked (and made) before any work starts, so
that a wrong ``--out-dir`` is a one-line error at once, not a traceback after the whole run;
result files are written whole or not at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from streampunct.cli import main


def _never(*_a, **_k):
    pytest.fail("the bench started its work before checking where its results go")


def test_prepare_out_dir_makes_the_folder_or_names_the_wrong_path(tmp_path):
    from benchmarks.common import prepare_out_dir

    made = prepare_out_dir(tmp_path / "a" / "b", "load.json")
    assert made == tmp_path / "a" / "b" and made.is_dir()
    assert prepare_out_dir(made) == made  # an existing folder is fine
    file = tmp_path / "file"
    file.write_text("x")
    with pytest.raises(NotADirectoryError) as exc:
        prepare_out_dir(file)
    assert str(exc.value) == f"cannot write results into {file}: it is a file, not a folder"
    with pytest.raises(NotADirectoryError) as exc:
        prepare_out_dir(file / "sub" / "dir")
    assert str(exc.value) == f"cannot write results into {file / 'sub' / 'dir'}: {file} is a file, not a folder"
    (made / "load.json").mkdir()
    with pytest.raises(IsADirectoryError) as exc:
        prepare_out_dir(made, "load.png", "load.json")
    assert str(exc.value) == f"cannot write the result {made / 'load.json'}: it is a folder"


def test_write_result_writes_the_json_atomically(tmp_path, monkeypatch):
    import streampunct.text.textfile as textfile
    from benchmarks.common import write_result

    written = []
    atomic = textfile.write_text_atomically
    monkeypatch.setattr(textfile, "write_text_atomically",
                        lambda path, text: (written.append(Path(path)), atomic(path, text)))
    path = write_result("r", {"a": 1}, tmp_path / "new", command="test")
    assert written == [tmp_path / "new" / "r.json"] and json.loads(path.read_text())["a"] == 1
    assert [p.name for p in (tmp_path / "new").iterdir()] == ["r.json"]  # no temporary file left


def test_a_result_replaced_is_named_with_when_it_was_measured(tmp_path, capsys):
    from benchmarks.common import write_result

    path = write_result("r", {"a": 1}, tmp_path, command="test")
    measured = json.loads(path.read_text())["measured_at"]
    assert capsys.readouterr().err == ""
    write_result("r", {"a": 2}, tmp_path, command="test")
    assert capsys.readouterr().err == f"replacing {path} (measured at {measured}); --out-dir or --name keeps it\n"
    assert json.loads(path.read_text())["a"] == 2


def _model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "streampunct.json").write_text("{}")
    return folder


# bench, its arguments, and the function its run calls first (it must not be called)
BENCHES = [
    ("accuracy", [], "streampunct.text.word_labels", "read_word_labels"),
    ("load", ["--url", "ws://127.0.0.1:9/v1/stream"], "benchmarks.load_bench", "load_corpus"),
    ("soak", ["--engine", "fake"], "benchmarks.soak_bench", "load_corpus"),
    ("flood", ["--engine", "fake"], "benchmarks.flood_bench", "load_corpus"),
    ("hypotheses", ["--engine", "fake"], "benchmarks.hypothesis_load", "read_words"),
    ("live", ["--engine", "fake"], "benchmarks.live_bench", "read_live_data"),
    ("itn", [], "benchmarks.itn_bench", "read_phrases"),
    ("failover", ["--engine", "fake"], "benchmarks.failover_bench", "find_haproxy"),
    ("triton", ["--model", "MODEL"], "engines.build.triton_pytriton", "server_python"),
]


@pytest.mark.parametrize(("bench", "argv", "module", "first"), BENCHES)
def test_an_out_dir_that_is_a_file_fails_at_once_in_one_line(bench, argv, module, first, tmp_path, capsys,
                                                              monkeypatch):
    import importlib

    monkeypatch.setattr(importlib.import_module(module), first, _never)
    argv = [str(_model_folder(tmp_path)) if a == "MODEL" else a for a in argv]
    file = tmp_path / "results"
    file.write_text("not a folder")
    assert main(["bench", bench, *argv, "--out-dir", str(file)]) == 2
    assert capsys.readouterr().err == (f"streampunct bench: error: cannot write results into {file}: "
                                       "it is a file, not a folder\n")
    assert file.read_text() == "not a folder"


def test_an_out_dir_under_a_file_and_a_result_name_that_is_a_folder(tmp_path, capsys, monkeypatch):
    import benchmarks.load_bench as load_bench

    monkeypatch.setattr(load_bench, "load_corpus", _never)
    file = tmp_path / "file"
    file.write_text("x")
    url = ["--url", "ws://127.0.0.1:9/v1/stream"]
    assert main(["bench", "load", *url, "--out-dir", str(file / "load")]) == 2
    assert capsys.readouterr().err == (f"streampunct bench: error: cannot write results into {file / 'load'}: "
                                       f"{file} is a file, not a folder\n")
    (tmp_path / "out" / "mine.json").mkdir(parents=True)
    assert main(["bench", "load", *url, "--out-dir", str(tmp_path / "out"), "--name", "mine"]) == 2
    assert capsys.readouterr().err == (f"streampunct bench: error: cannot write the result "
                                       f"{tmp_path / 'out' / 'mine.json'}: it is a folder\n")


def test_the_engine_bench_checks_its_out_json_first(tmp_path, capsys, monkeypatch):
    import benchmarks.engine_bench as engine_bench

    monkeypatch.setattr(engine_bench, "run_engine_bench", _never)
    monkeypatch.setattr(engine_bench, "run_stream_bench", _never)
    file = tmp_path / "file"
    file.write_text("x")
    assert main(["bench", "engine", "--out-json", str(file / "engine.json")]) == 2
    assert capsys.readouterr().err == (f"streampunct bench: error: cannot write results into {file}: "
                                       "it is a file, not a folder\n")


@pytest.mark.parametrize("name", ["sub/x", "", "..", ".hidden", "a\\b"])
def test_a_result_name_with_a_folder_in_it_is_a_usage_error_before_the_work(name, capsys, monkeypatch):
    import benchmarks.load_bench as load_bench

    monkeypatch.setattr(load_bench, "run_load_bench", _never)
    with pytest.raises(SystemExit) as e:
        main(["bench", "load", "--name", name])
    assert e.value.code == 2
    assert "argument --name: must be a file name stem (the results go in --out-dir)" in capsys.readouterr().err


def test_the_engine_bench_json_records_when_and_at_which_commit(tmp_path, capsys):
    from benchmarks.engine_bench import _write_json

    _write_json({"benchmark": "engine", "command": "c", "results": []}, tmp_path / "e.json")
    written = json.loads((tmp_path / "e.json").read_text())
    assert written["measured_at"] and "commit" in written and written["results"] == []
    assert capsys.readouterr().out == f"wrote {tmp_path / 'e.json'}\n"


# python -m benchmarks.MODULE ARGV with an output file under a file: a usage error before the work
MAINS = [
    ("partial_threshold", ["--out", "OUT"], "streampunct.text.word_labels", "read_punctuated_text"),
    ("torch_engine_bench", ["--out", "OUT"], "benchmarks.torch_engine_bench", "run_torch_engine_bench"),
    ("int8_accuracy", ["m", "--data", "d.tsv", "--out-json", "OUT"], "benchmarks.int8_accuracy",
     "run_int8_accuracy"),
    ("compare_models", ["a", "b", "--json", "OUT"], "training.data", "load_validation_docs"),
    ("mark_rate", ["m", "--json", "OUT"], "benchmarks.mark_rate", "held_out_captions"),
    ("ablation", ["a=b", "--json", "OUT"], "benchmarks.ablation", "_parse_model"),
    ("load_proxy_model", ["OUT"], "benchmarks.load_proxy_model", "build_proxy_model"),
]


@pytest.mark.parametrize(("module", "argv", "patched", "first"), MAINS)
def test_a_python_m_bench_checks_its_output_path_first(module, argv, patched, first, tmp_path, capsys, monkeypatch):
    import importlib

    monkeypatch.setattr(importlib.import_module(patched), first, _never)
    file = tmp_path / "file"
    file.write_text("x")
    out = file / "result.json"
    with pytest.raises(SystemExit) as exc:
        importlib.import_module(f"benchmarks.{module}").main([str(out) if a == "OUT" else a for a in argv])
    assert exc.value.code == 2
    where = file if module != "load_proxy_model" else out
    what = "it is a file" if module != "load_proxy_model" else f"{file} is a file"
    assert f"error: cannot write results into {where}: {what}, not a folder\n" in capsys.readouterr().err


def test_results_go_to_the_checkout_or_the_current_directory_never_site_packages(tmp_path):
    """Installed from a wheel, the benchmarks' folder is in site-packages: a run from there
    made site-packages/benchmarks/results before it failed on its data."""
    from benchmarks.common import REPO, RESULTS_DIR, default_results_dir

    assert RESULTS_DIR == REPO / "benchmarks" / "results"  # this checkout
    (tmp_path / "pyproject.toml").write_text("")
    assert default_results_dir(tmp_path) == tmp_path / "benchmarks" / "results"
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    assert default_results_dir(site) == Path("benchmarks", "results")  # relative: the current directory


def test_the_accuracy_table_shows_a_right_context_of_0():
    from benchmarks.accuracy_bench import format_table

    classes = {"COMMA": 50.0, "PERIOD": 60.0, "QUESTION": 70.0}
    latency = {"latency_words_mean": 0.0, "latency_words_p95": 0.0, "latency_s_mean": 0.0, "latency_s_p95": 0.0}
    rows = format_table([{"mode": "offline", "setting": None, "overall_f1": 72.2, "per_class_f1": classes},
                         {"mode": "right_context", "setting": 0, "overall_f1": 27.3, "per_class_f1": classes,
                          **latency}]).splitlines()
    assert rows[1].split()[:3] == ["offline", "-", "72.2"] and rows[2].split()[:3] == ["right_context", "0", "27.3"]


def test_accuracy_refuses_empty_data_before_the_model_and_writes_nothing(tmp_path, capsys, monkeypatch):
    import streampunct.core.decoder as decoder

    monkeypatch.setattr(decoder.OfflineDecoder, "from_model_dir", classmethod(_never))
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    out = tmp_path / "out"
    assert main(["bench", "accuracy", "--data", str(empty), "--out-dir", str(out)]) == 2
    assert capsys.readouterr() == ("", f"streampunct bench: error: {empty}: no words to score\n")
    assert list(out.iterdir()) == []  # no accuracy.json, no accuracy.png


@pytest.mark.parametrize("bench", ["accuracy", "live", "load", "soak", "flood", "triton", "hypotheses", "failover"])
def test_a_result_name_given_with_its_json_suffix_names_that_file(bench):
    """``--name foo.json`` writes ``foo.json`` (not ``foo.json.json``), as ``--name foo`` does."""
    from streampunct.cli import build_parser

    required = ["--model", "models/default"] if bench == "triton" else []
    for name in ("foo.json", "foo"):
        assert build_parser().parse_args(["bench", bench, *required, "--name", name]).name == "foo"


def test_a_result_name_of_only_the_suffix_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        main(["bench", "load", "--name", ".json"])
    assert e.value.code == 2
    assert "argument --name: must be a file name stem" in capsys.readouterr().err


def test_the_failover_result_of_a_name_with_its_suffix(tmp_path, monkeypatch):
    """What the bench writes with ``--name foo.json``: ``foo.json``."""
    from benchmarks.common import write_result
    from streampunct.cli import build_parser

    args = build_parser().parse_args(["bench", "failover", "--name", "foo.json", "--out-dir", str(tmp_path)])
    assert write_result(args.name, {}, args.out_dir).name == "foo.json"
