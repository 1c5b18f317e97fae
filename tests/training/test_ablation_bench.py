"""benchmarks.ablation: scoring checkpoints once on labelled test files."""

import json

import pytest

torch = pytest.importorskip("torch")

from benchmarks.ablation import main, markdown  # noqa: E402
from streampunct.evaluation.scores import evaluate  # noqa: E402
from streampunct.labels import LABELS  # noqa: E402
from training.run import run  # noqa: E402

from .conftest import synthetic_words  # noqa: E402
from .test_train_tiny import tiny_config  # noqa: E402


def _write_test_set(path, n, seed):
    words, labels = synthetic_words(n, seed=seed)
    path.write_text("".join(f"{w}\t{lab}\n" for w, lab in zip(words, labels, strict=True)), encoding="utf-8")
    return words, [LABELS.index(lab) for lab in labels]


def test_scores_a_crf_checkpoint_with_argmax_and_viterbi(tiny_base_model, tiny_data_root, tmp_path, capsys):
    result = run(tiny_config(tiny_base_model, tiny_data_root, tmp_path / "crf", "optim.max_steps=10",
                             'model.head="blstm_crf"'))
    words, gold = _write_test_set(tmp_path / "test_a", 300, seed=11)
    _write_test_set(tmp_path / "test_b", 120, seed=12)
    out = tmp_path / "res" / "abl.json"
    assert main([f"tiny={result.best_dir}", "--data", str(tmp_path / "test_a"), str(tmp_path / "test_b"),
                 "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["benchmark"] == "abl" and rec["command"].startswith("python -m benchmarks.ablation tiny=")
    (m,) = rec["models"]
    assert m["name"] == "tiny" and m["head"] == "blstm_crf" and m["engine"] == "torch fp32"
    assert set(m["test"]) == {"test_a", "test_b"}
    assert m["validation"]["overall_f1"] == pytest.approx(result.best_f1, abs=0.01)
    assert "viterbi" in m["test"]["test_a"] and m["test"]["test_a"]["n_words"] == 300

    # the figure is the argmax of the checkpoint's own offline decode, computed independently here
    from engines.build.torch_engine import TorchEngine
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.model import load_model_info
    from training.checkpoint import load_checkpoint

    info = load_model_info(result.best_dir)
    p = OfflineDecoder(TorchEngine(load_checkpoint(result.best_dir)[0]), info.aligner(), info.window)
    try:
        pred = p.punctuate(words, end_of_stream=False)  # plain argmax, as the scorers
    finally:
        p.close()
    assert m["test"]["test_a"]["overall_f1"] == pytest.approx(round(evaluate(gold, pred).overall_f1, 2))
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| model | dev2010 at training (its meta) | test_a | test_b | test_a COMMA")
    a, b = m["test"]["test_a"]["overall_f1"], m["test"]["test_b"]["overall_f1"]
    assert table[2].startswith(f"| tiny | {m['validation']['overall_f1']:.1f} | {a:.1f} | {b:.1f} | ")


def test_markdown_rows_follow_the_input_order():
    def rec(name, f1):
        per = {c: {"f1": f1} for c in ("COMMA", "PERIOD", "QUESTION")}
        return {"name": name, "validation": {"overall_f1": f1},
                "test": {"test2011": {"overall_f1": f1, "per_class": per},
                         "test2011asr": {"overall_f1": f1 - 5, "per_class": per}}}

    lines = markdown([rec("b", 60.0), rec("a", 50.0)]).splitlines()
    assert lines[2].startswith("| b | 60.0 | 60.0 | 55.0 | 60.0 / 60.0 / 60.0 |")
    assert lines[3].startswith("| a | 50.0 | 50.0 | 45.0 |")


def test_bad_model_arguments_are_clear_errors(tmp_path, capsys):
    from benchmarks.common import run_module
    from streampunct.errors import InputError

    with pytest.raises(InputError, match="must be NAME=FOLDER"):
        main(["checkpoints/x"])
    with pytest.raises(InputError, match="no streampunct.json"):
        main([f"x={tmp_path}"])
    # `python -m benchmarks.ablation`: one line and status 2, as its error boundary promises
    assert run_module(lambda: main([f"x={tmp_path}"]), "python -m benchmarks.ablation") == 2
    assert capsys.readouterr().err == (f"python -m benchmarks.ablation: error: {tmp_path} is not a model folder "
                                       "or checkpoint (no streampunct.json)\n")
    (tmp_path / "streampunct.json").write_text("{}")
    with pytest.raises(InputError, match="no such data file"):
        main([f"x={tmp_path}", "--data", str(tmp_path / "missing")])


def test_compare_models_reports_both_scores_and_agreement(tiny_base_model, tiny_data_root, tmp_path):
    import shutil

    from benchmarks.compare_models import main as compare_main
    from streampunct.core.windowing import WindowConfig

    from .test_train_tiny import trained_runtime_folder

    _, a = trained_runtime_folder(tiny_base_model, tiny_data_root, tmp_path, 10)
    b = tmp_path / "copy"
    shutil.copytree(a, b)
    out = tmp_path / "cmp.json"
    assert compare_main([str(a), str(b), "--data-root", str(tiny_data_root), "--window", "30", "6", "4",
                         "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["label_agreement"] == 100.0 and rec["f1_difference"] == 0.0
    assert rec["n_words"] == 200 and rec["valid"] == "dev2010"
    ma, mb = rec["models"][str(a)], rec["models"][str(b)]
    assert ma["window"] == mb["window"] == WindowConfig(30, 6, 4).to_dict()
    assert ma["overall_f1"] == mb["overall_f1"]

def test_compare_models_refuses_a_test_set(capsys, tmp_path):
    from benchmarks.compare_models import main as compare_main

    args = ["models/default", "models/base", "--valid", "test2011", "--data-root", str(tmp_path)]
    assert compare_main(args) == 2
    assert "test2011 is a test set: never train or select models on it" in capsys.readouterr().err


def test_compare_models_refuses_one_folder_twice(capsys):
    from benchmarks.compare_models import main as compare_main

    # the report is keyed by folder: the same one twice used to print one model and "b - a = +0.00"
    with pytest.raises(SystemExit) as exit_:
        compare_main(["models/default", "./models/default/"])
    assert exit_.value.code == 2
    assert "a and b are the same folder (models/default): nothing to compare" in capsys.readouterr().err
