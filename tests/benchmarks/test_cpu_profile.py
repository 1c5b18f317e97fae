"""benchmarks.cpu_profile: py-spy's collapsed stacks summed into the stages of a finalized word."""

import json

import pytest

from benchmarks.cpu_profile import EVENT_LOOP, OTHER, main, read_collapsed, stage_of

LOOP = ("thread (1): MainThread;_run_module_as_main (<frozen runpy>:198);BaseEventLoop.run_forever "
        "(asyncio/base_events.py:607);BaseEventLoop._run_once (asyncio/base_events.py:1922);Handle._run "
        "(asyncio/events.py:80)")
ENGINE = ("thread (7): streampunct-engine-1_0;Thread._bootstrap (threading.py:1002);_worker "
          "(concurrent/futures/thread.py:83);Batcher._infer_batch (streampunct/server/batcher.py:544);"
          "run_stream_calls (streampunct/core/stream_cache.py:226);OrtStreamEngine.infer_stream "
          "(engines/ort_engine.py:300);InferenceSession.run (onnxruntime/capi/onnxruntime_inference_collection.py:266)")


@pytest.mark.parametrize("stack, stage", [
    (ENGINE, "engine call (model)"),
    (ENGINE.rsplit(";", 2)[0], "stream cache and padding"),
    (LOOP + ";Session._write (streampunct/server/session.py:210);Connection.send (websockets/asyncio/connection.py:400);"
     "_SelectorSocketTransport.write (asyncio/selector_events.py:1060)", "frames out (encoding, sending)"),
    (LOOP + ";Session._read (streampunct/server/session.py:180);dumps (json/__init__.py:231);"
     "JSONEncoder.encode (json/encoder.py:200)", "JSON"),
    (LOOP + ";Session._drive (streampunct/server/session.py:300);SessionProtocol.apply "
     "(streampunct/core/session_protocol.py:400)", "session protocol and stream state"),
    (LOOP + ";_SelectorSocketTransport._read_ready (asyncio/selector_events.py:990)", EVENT_LOOP),
    (LOOP + ";somewhere (mylib/thing.py:3)", OTHER),
    # uvloop: the loop's work runs in C under asyncio.Runner.run, below the server's entry frame
    ("thread (1): MainThread;<module> (streampunct:6);main (streampunct/cli.py:134);run (streampunct/commands/serve.py:358);"
     "run_server (streampunct/server/app.py:889);Runner.run (asyncio/runners.py:118)", EVENT_LOOP),
    ("thread (1): MainThread;worker_main (streampunct/server/workers.py:382);run_server "
     "(streampunct/server/app.py:889);Runner.run (asyncio/runners.py:118)", EVENT_LOOP),
    ("thread (1): MainThread;run_server (streampunct/server/app.py:889);Runner.run (asyncio/runners.py:118);"
     "Session._drive (streampunct/server/session.py:300)", "server glue (sessions, metrics, HTTP)"),
])
def test_a_stack_counts_for_the_innermost_frame_that_names_a_stage(stack, stage):
    assert stage_of(stack.split(";")) == stage


def test_collapsed_stacks_sum_into_shares_and_ms_per_word(tmp_path, capsys):
    lines = [f"{ENGINE} 30", f"{LOOP} 10"]
    b = read_collapsed(lines)
    assert b.total == 40 and b.shares() == {"engine call (model)": 0.75, EVENT_LOOP: 0.25}
    assert b.to_json(cpu_ms_per_word=2.0)["ms_per_word"] == {"engine call (model)": 1.5, EVENT_LOOP: 0.5}
    f = tmp_path / "stacks.txt"
    f.write_text("\n".join(lines) + "\n")
    assert main([str(f), "--json", "--cpu-ms-per-word", "2"]) == 0
    assert json.loads(capsys.readouterr().out)["shares"] == {"engine call (model)": 0.75, EVENT_LOOP: 0.25}


def test_a_file_that_is_not_collapsed_stacks_is_refused(tmp_path, capsys):
    f = tmp_path / "x.txt"
    f.write_text("not a stack\n")
    with pytest.raises(SystemExit) as e:
        main([str(f)])
    assert e.value.code == 2 and "no sample count" in capsys.readouterr().err


def test_no_py_spy_is_a_dependency_error_that_says_what_to_install(monkeypatch, tmp_path):
    """`bench load --sample-profile` without py-spy: one line at the command line, not a traceback."""
    import shutil
    import sys

    from benchmarks.cpu_profile import py_spy_command
    from streampunct.errors import DependencyError

    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(DependencyError, match=r"py-spy is not installed: pip install -e '\.\[dev\]'"):
        py_spy_command(1, 1.0, tmp_path / "out")
