"""A model folder can give streaming windows their own geometry (``stream_window``)."""

import json

import pytest

from engines.base import EngineBase
from streampunct.core.windowing import WindowConfig
from streampunct.errors import ModelError
from streampunct.model import load_model_info

WINDOW = {"size": 126, "left": 30, "right": 15}


def folder(tmp_path, **extra):
    from tests.engines.conftest import write_tiny_tokenizer

    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    write_tiny_tokenizer(d / "tokenizer.json")
    (d / "streampunct.json").write_text(json.dumps({"labels": ["O", "COMMA", "PERIOD", "QUESTION"],
                                                    "label_position": "last", "window": WINDOW, **extra}))
    return d


def test_stream_window_defaults_to_the_window(tmp_path):
    info = load_model_info(folder(tmp_path))
    assert info.stream_window == info.window == WindowConfig(126, 30, 15)


def test_stream_window_overrides_only_what_it_names(tmp_path):
    info = load_model_info(folder(tmp_path, stream_window={"left": 20}))
    assert info.window == WindowConfig(126, 30, 15)
    assert info.stream_window == WindowConfig(126, 20, 15)


@pytest.mark.parametrize("bad", [{"width": 3}, {"left": -1}, {"left": "x"}, [20]])
def test_bad_stream_window_is_a_model_error(tmp_path, bad):
    with pytest.raises(ModelError, match="bad stream_window"):
        load_model_info(folder(tmp_path, stream_window=bad))


def test_server_and_simulations_use_the_stream_window(tmp_path):
    from streampunct.core.decoder import OfflineDecoder
    from streampunct.server.app import ServerConfig, ServerRuntime

    d = folder(tmp_path, stream_window={"left": 20})
    runtime = ServerRuntime.from_model(ServerConfig(model_dir=d))
    assert runtime.window == WindowConfig(126, 20, 15)

    class Engine(EngineBase):
        def infer(self, ids, mask):  # pragma: no cover - not called
            raise AssertionError

    info = load_model_info(d)
    p = OfflineDecoder(Engine(), info.aligner(), info.window, info=info, stream_window=info.stream_window)
    assert p.window.left == 30 and p.stream_window.left == 20
    assert OfflineDecoder(Engine(), info.aligner(), info.window).stream_window == info.window
