"""The accelerator is ``hpu`` on the emulator, on a CPU build of torch and on the CUDA build
``pip install torch`` gives (no GPU here), where torch itself would refuse an HPU beside
CUDA ("Cannot have both HPU and cuda."): in ``torch.accelerator``, and in torch's C++, which
syncs gradients on the accelerator's stream and pins host memory for it (the DataLoader's
``pin_memory``, on by default in Trainer). The matrix runs this on both kinds of build.
"""

from __future__ import annotations

import pytest

from .conftest import emulated_env, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("emulator")]


def test_torch_accelerator_is_hpu_and_follows_torch_hpu(tmp_path):
    out = run(
        """
        import torch

        print("cuda_build=", torch.version.cuda is not None)
        print("accelerator=", torch.accelerator.current_accelerator())
        print("available=", torch.accelerator.is_available())
        print("count=", torch.accelerator.device_count())
        torch.accelerator.set_device_index(0)  # a Gaudi process holds one device: hpu:0
        print("index=", torch.accelerator.current_device_index(), torch.hpu.current_device())
        with torch.accelerator.device_index(0):
            print("inner=", torch.hpu.current_device())
        x = torch.ones(4, device="hpu") * 3
        torch.accelerator.synchronize()
        print("stream=", torch.accelerator.current_stream().device.type)
        print("sum=", int(x.sum().item()))
        print("cuda_available=", torch.cuda.is_available())
        w = torch.ones(3, device="hpu", requires_grad=True)
        ((w * w).sum() + (w * 2).sum()).backward()  # two producers: the buffer accumulates
        print("grad=", w.grad.cpu().tolist())
        from torch.utils.data import DataLoader
        batch = next(iter(DataLoader(list(range(8)), batch_size=4, pin_memory=True)))
        print("pinned=", batch.is_pinned(), torch.ones(2).is_pinned())
        """,
        emulated_env(tmp_path, devices=2),
    ).lines()
    assert out["accelerator"] == "hpu"
    assert out["available"] == "True"
    assert out["count"] == "2"
    assert out["index"] == "0 0"
    assert out["inner"] == "0"
    assert out["stream"] == "hpu"
    assert out["sum"] == "12"
    assert out["cuda_available"] == "False"  # the user's CUDA is untouched: there is no GPU
    assert out["grad"] == "[4.0, 4.0, 4.0]"
    assert out["pinned"] == "True False"
