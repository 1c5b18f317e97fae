from pathlib import Path

import pytest

from streampunct.errors import InputError
from training.config import config_to_toml, load_config, parse_override

CONFIGS = Path(__file__).resolve().parents[2] / "training" / "configs"


@pytest.mark.parametrize("name", sorted(p.stem for p in CONFIGS.glob("*.toml")))
def test_shipped_configs_load_and_render_back(name, tmp_path):
    cfg = load_config(CONFIGS / f"{name}.toml")
    assert cfg.name == name
    again = tmp_path / f"{name}.toml"
    again.write_text(config_to_toml(cfg))
    assert load_config(again) == cfg


def test_defaults_without_a_file():
    cfg = load_config(None, [])
    assert cfg.method.kind == "supervised" and cfg.data.max_len == 128


def test_unknown_key_is_an_error_naming_valid_keys(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text("[optim]\nlearning_rate = 1e-4\n")
    with pytest.raises(InputError, match="learning_rate.*valid keys: .*lr"):
        load_config(p)


def test_wrong_type_is_an_error(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('[optim]\nepochs = "two"\n')
    with pytest.raises(InputError, match="optim.epochs"):
        load_config(p)


def test_overrides():
    assert parse_override("optim.lr=1e-4") == (["optim", "lr"], 1e-4)
    assert parse_override("method.scl.mode=paper") == (["method", "scl", "mode"], "paper")
    cfg = load_config(CONFIGS / "ce.toml", ["optim.lr=5e-5", 'data.train=["dev2012", "ted"]',
                                            "method.scl.enabled=true"])
    assert cfg.optim.lr == 5e-5 and cfg.data.train == ("dev2012", "ted") and cfg.method.scl.enabled
    with pytest.raises(InputError):
        load_config(CONFIGS / "ce.toml", ["model.head=blstm_crf", "method.loss=focal"])
    with pytest.raises(InputError, match="window"):
        load_config(CONFIGS / "ce.toml", ["eval.window_left=80"])


def test_a_config_that_is_a_folder_or_not_text_is_one_line(tmp_path, capsys):
    from training.cli import main as train_main

    folder = tmp_path / "adir"
    folder.mkdir()
    binary = tmp_path / "bin.dat"
    binary.write_bytes(b"name = 1\n\xff\xfe\x00")
    with pytest.raises(InputError, match=rf"^config file {folder} is a folder, not a TOML file$"):
        load_config(folder)
    assert train_main(["--config", str(binary)]) == 2
    assert capsys.readouterr().err == (
        f"streampunct train: error: {binary}: not a TOML config: not UTF-8 text (byte 0xff at offset 9)\n")
    assert train_main(["--config", str(folder)]) == 2
    assert capsys.readouterr().err == f"streampunct train: error: config file {folder} is a folder, not a TOML file\n"


@pytest.mark.parametrize(("override", "message"), [
    ("optim.lr=nan", "optim.lr must be a finite number, not nan"),
    ("optim.lr=inf", "optim.lr must be a finite number, not inf"),
    ("optim.grad_clip=inf", "optim.grad_clip must be a finite number, not inf"),
    ("data.noise.share=nan", "data.noise.share must be a finite number, not nan"),
    ("optim.lr=-1", "optim.lr must be positive, not -1.0"),
    ("optim.batch_size=0", "optim.batch_size must be positive, not 0"),
    ("optim.epochs=-2", "optim.epochs must be positive, not -2"),
])
def test_a_non_finite_or_non_positive_value_is_refused_naming_it(override, message):
    with pytest.raises(InputError, match=f"^{message}$"):
        load_config(CONFIGS / "ce.toml", [override])


def test_train_refuses_a_nan_learning_rate_before_loading_anything(tmp_path, capsys):
    from training.cli import main as train_main

    # no data folder there: the config is refused first, in one line
    assert train_main(["--config", str(CONFIGS / "ce.toml"), "--set", "optim.lr=nan",
                       "--data-root", str(tmp_path / "none"), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == "streampunct train: error: optim.lr must be a finite number, not nan\n"
    assert not (tmp_path / "out").exists()
