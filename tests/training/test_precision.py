"""bf16 is used only where it is native; elsewhere a run says so and uses fp32."""

import logging

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from training import precision  # noqa: E402


@pytest.mark.parametrize("native", [True, False])
def test_bf16_follows_the_cpu(monkeypatch, caplog, native):
    monkeypatch.setattr(precision, "_cpu_native_bf16", lambda: native)
    with caplog.at_level(logging.WARNING, logger="training.precision"):
        got = precision.use_bf16(True, torch.device("cpu"), "training")
    assert got is native
    warned = [r.getMessage() for r in caplog.records]
    if native:
        assert warned == []
    else:
        assert len(warned) == 1 and "training" in warned[0] and "uses fp32" in warned[0]


def test_fp32_asked_for_is_fp32_without_a_word(monkeypatch, caplog):
    monkeypatch.setattr(precision, "_cpu_native_bf16", lambda: True)
    with caplog.at_level(logging.WARNING, logger="training.precision"):
        assert precision.use_bf16(False, torch.device("cpu")) is False
    assert caplog.records == []


def test_cuda_counts_as_native():
    assert precision.native_bf16(torch.device("cuda")) is True


def test_inference_without_native_bf16_gives_the_fp32_output(monkeypatch):
    from training.model import make_infer

    monkeypatch.setattr(precision, "_cpu_native_bf16", lambda: False)
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)

    class Tiny(torch.nn.Module):
        def forward(self, ids, mask):
            return lin(torch.nn.functional.one_hot(ids, 8).float())

    ids = np.array([[1, 2, 3]], dtype=np.int64)
    mask = np.ones_like(ids)
    got = make_infer(Tiny(), device="cpu", bf16=True)(ids, mask)
    want = make_infer(Tiny(), device="cpu", bf16=False)(ids, mask)
    np.testing.assert_array_equal(got, want)  # no bf16 rounding crept in


def test_native_bf16_on_a_cpu_is_told_by_its_flags(monkeypatch, tmp_path):
    monkeypatch.setattr(precision, "_onednn_bf16", lambda: True)  # oneDNN: yes on any AVX-512 CPU
    read = precision.cpu_flags
    info = tmp_path / "cpuinfo"
    monkeypatch.setattr(precision, "cpu_flags", lambda: read(str(info)))
    for flags, native in (("fpu avx512f avx512bw avx512_vnni", False), ("fpu avx512f avx512_bf16", True),
                          ("fpu amx_bf16 amx_tile", True)):
        info.write_text(f"processor\t: 0\nmodel name\t: X\nflags\t\t: {flags}\n\n")
        assert precision._cpu_native_bf16() is native, flags
    info.unlink()  # no flags to read (not Linux): oneDNN decides
    assert read(str(info)) is None and precision._cpu_native_bf16() is True
    monkeypatch.setattr(precision, "_onednn_bf16", lambda: False)
    assert precision._cpu_native_bf16() is False
