"""A real Triton Inference Server for a model folder, on a host without Triton's ONNX Runtime
backend: NVIDIA's PyTriton (``nvidia-pytriton``, which bundles ``tritonserver``) with a Python
model that runs the folder's whole-window graph with this package's ONNX Runtime engine::

    python -m engines.build.triton_pytriton --model models/default --grpc-port 8001

The model has the interface of the ``onnxruntime_onnx`` entry that ``streampunct build-engine
--triton-repo`` writes (:mod:`engines.build.triton_repo`): the same name (``streampunct``), inputs
``input_ids`` and ``attention_mask`` int64[B, T], outputs ``logits`` and, for a model with a
truecasing head, ``case_logits`` float32[B, T, 4], and Triton's dynamic batcher in front
(``max_batch``, ``max_queue_delay_us``). Triton merges requests of the same sequence length,
from any number of front ends, into one call of the Python model. So a front end with
``--engine triton`` (:mod:`engines.triton_engine`) talks to it exactly as it would to a GPU
host that serves the written repository; tests and ``bench triton`` use it here.

The computation is the local engine's (``engines.registry.load_engine("onnxruntime", ...)``:
a streaming-only folder such as ``models/base`` runs whole windows through its streaming
graph without a cache), so labels through this server equal the local engine's wherever
a row's logits do not depend on its batch (``rows_independent``; not for dynamic int8 graphs).

One line on stdout says when the model is ready (``triton ready: grpc 127.0.0.1:PORT model
NAME``); SIGTERM or SIGINT stops the server and its ``tritonserver`` child.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from engines.base import CASE_OUTPUT_NAME, INPUT_NAMES, OUTPUT_NAME, Engine
from engines.deps import require

logger = logging.getLogger(__name__)

#: The model's name in the repository and on this server (``--triton-name`` of build-engine).
DEFAULT_MODEL_NAME = "streampunct"
REPO = Path(__file__).resolve().parents[1]
#: Where ``scripts/setup_triton_server.sh`` puts the server's own environment (numpy < 2).
SERVER_VENV = REPO / "cache" / "triton-server"


def _numpy_major(python: str) -> int | None:
    """numpy's major version in ``python``'s environment with PyTriton, or None without PyTriton."""
    try:
        out = subprocess.run([python, "-c", "import pytriton, numpy; print(numpy.__version__)"],
                             capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return int(out.stdout.split(".")[0]) if out.returncode == 0 and out.stdout[:1].isdigit() else None


def server_python() -> str | None:
    """The interpreter that runs this module as a server, or None where there is none.

    PyTriton 0.7's Python backend stub is built against numpy 1: given numpy 2 arrays it returns
    empty outputs. So the server runs where PyTriton has numpy < 2: ``$STREAMPUNCT_TRITON_PYTHON``,
    else the environment ``scripts/setup_triton_server.sh`` makes (``cache/triton-server``),
    else this interpreter when it qualifies."""
    named = os.environ.get("STREAMPUNCT_TRITON_PYTHON")
    candidates = [named] if named else [str(SERVER_VENV / "bin" / "python"), sys.executable]
    for python in candidates:
        if python and Path(python).exists() and _numpy_major(python) == 1:
            return python
    return None


def free_port() -> int:
    """A free TCP port on the loopback interface (for a child that cannot take port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PyTritonProcess:
    """This module's server in a child process on free loopback ports (tests, ``bench triton``).

    :meth:`start` returns once the model answers ``is_model_ready`` over gRPC (polled, with a
    deadline); :meth:`stop` sends SIGTERM (the server stops ``tritonserver`` and cleans its
    workspace), then SIGKILL to the process group if it hangs.
    """

    def __init__(self, model_dir: str | Path, *, python: str, log_path: str | Path, model_name: str = DEFAULT_MODEL_NAME,
                 max_batch: int = 64, max_queue_delay_us: int = 1000, threads: int | None = None,
                 artifact: str | None = None, nice: int = 0) -> None:
        self.model_dir, self.python, self.log_path = Path(model_dir), python, Path(log_path)
        self.model_name = model_name
        self.grpc_port, self.http_port, self.metrics_port = free_port(), free_port(), free_port()
        self.argv = [python, "-m", "engines.build.triton_pytriton", "--model", str(self.model_dir), "--name", model_name,
                     "--grpc-port", str(self.grpc_port), "--http-port", str(self.http_port),
                     "--metrics-port", str(self.metrics_port), "--max-batch", str(max_batch),
                     "--max-queue-delay-us", str(max_queue_delay_us)]
        if threads:
            self.argv += ["--threads", str(threads)]
        if artifact:
            self.argv += ["--artifact", artifact]
        if nice:
            self.argv = ["nice", "-n", str(nice), *self.argv]
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """The gRPC endpoint (``engine option url``)."""
        return f"127.0.0.1:{self.grpc_port}"

    def start(self, timeout_s: float = 180.0) -> str:
        grpc = require("tritonclient.grpc", feature="waiting for the Triton server")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=REPO, env=env, start_new_session=True)
        client = grpc.InferenceServerClient(self.url)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"the Triton server exited with code {self.proc.returncode}:\n{self.log_tail()}")
                try:
                    if client.is_server_ready() and client.is_model_ready(self.model_name):
                        return self.url
                except Exception:  # noqa: BLE001 (not listening yet)
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the Triton server was not ready after {timeout_s:.0f} s:\n{self.log_tail()}")
                time.sleep(0.25)
        finally:
            client.close()

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def cpu_seconds(self) -> float | None:
        """User + system CPU seconds of the server and its children (tritonserver, the stub)."""
        psutil = require("psutil", feature="measuring the Triton server")
        if self.proc is None or self.proc.poll() is not None:
            return None
        try:
            root = psutil.Process(self.proc.pid)
            total = 0.0
            for p in [root, *root.children(recursive=True)]:
                times = p.cpu_times()
                total += times.user + times.system
            return total
        except psutil.Error:
            return None

    def stop(self, timeout: float = 40.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode


def infer_function(engine: Engine) -> Callable[..., dict[str, np.ndarray]]:
    """The Python model: Triton's batch of requests -> the engine's outputs (PyTriton ``@batch``
    concatenates the requests' rows into one array per input and splits the outputs back)."""
    pytriton_decorators = require("pytriton.decorators", feature="the PyTriton Triton server")

    @pytriton_decorators.batch
    def infer(input_ids: np.ndarray, attention_mask: np.ndarray) -> dict[str, np.ndarray]:
        logits, case = engine.infer_heads(input_ids, attention_mask)
        out = {OUTPUT_NAME: np.ascontiguousarray(logits, dtype=np.float32)}
        if case is not None:
            out[CASE_OUTPUT_NAME] = np.ascontiguousarray(case, dtype=np.float32)
        return out

    return infer


def _prefer_own_libpython() -> None:
    """Put this interpreter's ``libpython`` first on ``LD_LIBRARY_PATH`` (inherited by
    ``tritonserver`` and its Python backend stub). The stub links ``libpython3.X.so.1.0``
    by name: on a host whose system library is another patch release (a pyenv or venv
    interpreter beside Debian's), it would otherwise run this interpreter's standard library
    on the system's ``libpython`` and fail in ``multiprocessing``."""
    libdir = sysconfig.get_config_var("LIBDIR")
    library = sysconfig.get_config_var("INSTSONAME")
    if libdir and library and (Path(libdir) / library).is_file():
        paths = [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        if libdir not in paths:
            os.environ["LD_LIBRARY_PATH"] = os.pathsep.join([libdir, *paths])


def serve_model_folder(
    model_dir: str | Path,
    *,
    model_name: str = DEFAULT_MODEL_NAME,
    host: str = "127.0.0.1",
    grpc_port: int = 8001,
    http_port: int = 8000,
    metrics_port: int = 8002,
    max_batch: int = 64,
    max_queue_delay_us: int = 1000,
    artifact: str | None = None,
    engine_options: dict[str, Any] | None = None,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Serve ``model_dir`` until SIGTERM or SIGINT (blocks)."""
    pytriton_triton = require("pytriton.triton", feature="the PyTriton Triton server")
    model_config = require("pytriton.model_config", feature="the PyTriton Triton server")
    from engines.registry import load_engine

    engine = load_engine("onnxruntime", model_dir, artifact=artifact, **(engine_options or {}))
    outputs = [model_config.Tensor(name=OUTPUT_NAME, dtype=np.float32, shape=(-1, -1))]
    if engine.has_case:
        outputs.append(model_config.Tensor(name=CASE_OUTPUT_NAME, dtype=np.float32, shape=(-1, -1)))
    config = pytriton_triton.TritonConfig(
        grpc_address=host, grpc_port=grpc_port, http_address=host, http_port=http_port,
        metrics_port=metrics_port, log_verbose=0, exit_on_error=True,
    )

    def stop(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt  # Triton.serve() stops the server and cleans its workspace on it

    signal.signal(signal.SIGTERM, stop)
    _prefer_own_libpython()
    try:
        with pytriton_triton.Triton(config=config) as triton:
            triton.bind(
                model_name=model_name,
                infer_func=infer_function(engine),
                inputs=[model_config.Tensor(name=name, dtype=np.int64, shape=(-1,)) for name in INPUT_NAMES],
                outputs=outputs,
                config=model_config.ModelConfig(
                    max_batch_size=max_batch,
                    batcher=model_config.DynamicBatcher(max_queue_delay_microseconds=max_queue_delay_us),
                ),
                strict=False,
            )
            triton.run()
            if on_ready is not None:
                on_ready()
            triton.serve()
    except KeyboardInterrupt:
        pass
    finally:
        engine.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engines.build.triton_pytriton", description=__doc__.split("\n")[0])
    ap.add_argument("--model", type=Path, default=Path("models/default"), help="model folder (default: models/default)")
    ap.add_argument("--artifact", default=None, help="the folder's graph to serve (default: as onnxruntime chooses)")
    ap.add_argument("--name", default=DEFAULT_MODEL_NAME, help=f"model name on the server (default: {DEFAULT_MODEL_NAME})")
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    ap.add_argument("--grpc-port", type=int, default=8001)
    ap.add_argument("--http-port", type=int, default=8000)
    ap.add_argument("--metrics-port", type=int, default=8002)
    ap.add_argument("--max-batch", type=int, default=64, help="Triton's max_batch_size (default 64)")
    ap.add_argument("--max-queue-delay-us", type=int, default=1000,
                    help="longest a request waits in the dynamic batcher for others (default 1000)")
    ap.add_argument("--threads", type=int, default=None,
                    help="ONNX Runtime intra-op threads of the model (default: the physical cores)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("pytriton", "tritonclient"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    options = {"intra_op_threads": args.threads} if args.threads else {}

    def ready() -> None:
        print(f"triton ready: grpc {args.host}:{args.grpc_port} model {args.name}", flush=True)

    serve_model_folder(args.model, model_name=args.name, host=args.host, grpc_port=args.grpc_port,
                       http_port=args.http_port, metrics_port=args.metrics_port, max_batch=args.max_batch,
                       max_queue_delay_us=args.max_queue_delay_us, artifact=args.artifact,
                       engine_options=options, on_ready=ready)
    return 0


if __name__ == "__main__":
    sys.exit(main())
