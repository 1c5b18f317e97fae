"""An empty path argument (``--out "$UNSET"``) is a usage error, never the current folder: a
command that replaces its output would replace what the current folder holds."""

import pytest

from streampunct.cli import main as cli

CASES = {
    "build-engine --out": (cli, ["build-engine", "--model", "models/default", "--out", ""]),
    "build-engine --triton-repo": (cli, ["build-engine", "--model", "models/default", "--triton-repo", " "]),
    "bench load --out-dir": (cli, ["bench", "load", "--engine", "fake", "--out-dir", ""]),
    "bench accuracy --out-dir": (cli, ["bench", "accuracy", "--out-dir", ""]),
    "evaluate --json": (cli, ["evaluate", "--data", "x.txt", "--json", ""]),
}


def _recipe(argv):
    from training.recipe import main

    return main(argv)


def _build_data(argv):
    from training.build_data import main

    return main(argv)


CASES["python -m training.recipe --out"] = (_recipe, ["--out", ""])
CASES["python -m training.build_data --out"] = (_build_data, ["--sources", "src", "--out", ""])


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_empty_path_is_refused_before_any_work(case, tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")  # build-engine, bench and the recipe are the train extra's
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    run, argv = CASES[case]
    try:
        code = run(argv)
    except SystemExit as e:  # argparse's usage error
        code = e.code
    assert code == 2
    assert "expected a path, got an empty string" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


#: Options whose empty value once meant something else: serve --itn-cache "" the default cache (where
#: punctuate --itn-cache "" was a usage error), caption --out "" no output file, punctuate --out "" "."
#: (and an empty input file "." too)
PARSED = {
    "serve --itn-cache": ["serve", "--engine", "fake", "--itn", "--itn-cache", ""],
    "serve --itn-cache (blank)": ["serve", "--engine", "fake", "--itn-cache", " "],
    "punctuate --itn-cache": ["punctuate", "--itn", "--itn-cache", "", "x.txt"],
    "punctuate --out": ["punctuate", "--out", "", "x.txt"],
    "caption --out": ["caption", "--out", "", "x.txt"],
    # the input file: "" was read as "." ("is a directory")
    "punctuate input": ["punctuate", ""],
    "caption transcript": ["caption", ""],
}


@pytest.mark.parametrize("case", sorted(PARSED))
def test_an_empty_path_is_a_usage_error_in_every_command(case, capsys):
    from streampunct.cli import build_parser

    option = case.split()[1]
    with pytest.raises(SystemExit) as exited:  # refused by argparse: nothing runs (serve serves nothing)
        build_parser().parse_args(PARSED[case])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        f"error: argument {option}: expected a path, got an empty string")


def test_the_cue_checker_refuses_an_empty_itn_cache(capsys):
    from streampunct.client.subtitles import main

    with pytest.raises(SystemExit) as exited:
        main(["cues.jsonl", "--itn", "--itn-cache", ""])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        "error: argument --itn-cache: expected a path, got an empty string")
