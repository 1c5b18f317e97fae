"""The torch reference engine: a module behind the Engine protocol (not a serving backend)."""

from __future__ import annotations

import numpy as np
import pytest

from engines.base import InferenceError
from engines.build.torch_engine import TorchEngine
from engines.registry import get_backend

torch = pytest.importorskip("torch")


def test_runs_the_module_and_describes_its_io(tiny_module):
    engine = TorchEngine(tiny_module, num_labels=4)
    ids, mask = np.array([[2, 10, 11, 3]]), np.ones((1, 4), np.int64)
    with torch.no_grad():
        expected = tiny_module(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    np.testing.assert_allclose(engine.infer(ids, mask), expected, atol=1e-6)
    spec = engine.io_spec()
    assert spec.backend == "torch" and spec.outputs[0].shape == ("batch", "sequence", 4)
    assert spec.num_labels == 4
    engine.close()
    with pytest.raises(InferenceError, match="closed"):
        engine.infer(ids, mask)


def test_the_reference_is_not_the_torch_serving_backend():
    """``load_engine("torch", ...)`` serves a model folder's graph weights (engines.torch_backend);
    this wrapper of a training module stays the build's parity reference."""
    assert get_backend("torch").module == "engines.torch_backend"
