"""``training.cli_support.run_tool``: errors a user can fix exit 2 with one line; bugs keep their traceback."""

from __future__ import annotations

import pytest

from streampunct.errors import InputError, ModelError
from training.cli_support import run_tool


def test_a_tool_that_works_exits_0():
    done = []
    assert run_tool(lambda: done.append(1)) == 0 and done == [1]


@pytest.mark.parametrize("error", [InputError("bad --t"), ModelError("no head.safetensors")])
def test_user_errors_exit_2_with_one_line(error, capsys):
    def fail():
        raise error

    assert run_tool(fail) == 2
    assert capsys.readouterr().err == f"error: {error}\n"


def test_bugs_are_not_swallowed():
    def bug():
        raise KeyError("oops")

    with pytest.raises(KeyError):
        run_tool(bug)


def test_the_tools_use_it(tmp_path, capsys):
    from training import interpolate, onnx_import

    assert interpolate.main([str(tmp_path), str(tmp_path), "--t", "2", "--out", str(tmp_path / "o")]) == 2
    assert "error: --t must be in [0, 1], got 2.0" in capsys.readouterr().err
    assert onnx_import.main([str(tmp_path), str(tmp_path / "o")]) == 2
    assert "has no model.onnx, model.int8.onnx or model.int4.onnx" in capsys.readouterr().err
