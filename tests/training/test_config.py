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
