"""Refusals a user meets before the work: an output path that cannot be written (a file in
the way) and a test set under another spelling (upper case, a link to it)."""

from __future__ import annotations

import pytest

from streampunct.errors import InputError


def test_check_writable_refuses_a_file_in_the_way_and_creates_nothing(tmp_path):
    from training.cli_support import check_writable

    blocker = tmp_path / "afile"
    blocker.write_text("x")
    with pytest.raises(InputError, match="is a file"):
        check_writable(blocker / "x.npz", "--out")
    with pytest.raises(InputError, match="is a file, not a folder"):
        check_writable(blocker, "--out", folder=True)
    with pytest.raises(InputError, match="is a folder, not a file"):
        check_writable(tmp_path, "--json")
    assert check_writable(tmp_path / "new" / "deeper" / "r.json", "--json").is_absolute()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_check_writable_refuses_a_link_to_nothing_and_takes_the_path_as_written(tmp_path, monkeypatch):
    """A dangling link on the way would make the later mkdir fail after the work; a "~" the shell
    left is a folder named "~" where the tools write (found in review, 2026-12-02)."""
    from training.cli_support import check_writable

    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(InputError, match="is a link to nothing"):
        check_writable(tmp_path / "dangling" / "soft.npz", "--out")
    with pytest.raises(InputError, match="is a link to nothing"):
        check_writable(tmp_path / "dangling", "--out", folder=True)
    monkeypatch.chdir(tmp_path)
    assert check_writable("~/r.json", "--json") == tmp_path / "~" / "r.json"


def test_test_sets_are_refused_in_any_case_and_through_links(tmp_path):
    from training.data import load_labelled

    words = "".join(f"w{i}\tO\n" for i in range(20))
    (tmp_path / "TEST2011.txt").write_text(words)
    (tmp_path / "test2011asr").write_text(words)
    (tmp_path / "innocent.txt").symlink_to(tmp_path / "test2011asr")
    for name in ("TEST2011.txt", "innocent.txt"):
        with pytest.raises(InputError, match="is a test set"):
            load_labelled(str(tmp_path / name), tmp_path, tmp_path / "cache")
    from training.data import is_test_set

    assert is_test_set("Tst2011.tsv") and not is_test_set(tmp_path / "dev2012")


def test_distill_label_refuses_an_unwritable_out_before_reading_data(tmp_path, capsys):
    from training.distill import main

    (tmp_path / "afile").write_text("x")
    rc = main(["label", "--teacher", str(tmp_path / "no_teacher"), "--labelled", "dev2012",
               "--data-root", str(tmp_path / "no_data"), "--out", str(tmp_path / "afile" / "soft.npz")])
    assert rc == 2 and "--out" in capsys.readouterr().err


def test_checkpoint_report_refuses_an_unwritable_json_and_a_negative_right_context(tmp_path, capsys):
    from training.checkpoint_report import main

    (tmp_path / "afile").write_text("x")
    rc = main([str(tmp_path / "no_ckpt"), "--json", str(tmp_path / "afile" / "r.json")])
    assert rc == 2 and "--json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path / "no_ckpt"), "--right-context", "-1"])
    assert e.value.code == 2 and "--right-context" in capsys.readouterr().err


def test_train_refuses_an_out_that_is_a_file_before_reading_data(tmp_path):
    from training.config import load_config
    from training.run import run

    (tmp_path / "afile").write_text("x")
    cfg = load_config(None, [f'data.root="{tmp_path / "no_data"}"'])
    with pytest.raises(InputError, match="--out .* is a file"):
        run(cfg, tmp_path / "afile")
