"""A Gaudi process drives the one module it acquired, hpu:0 (gaudi-pytorch-bridge: the
device guard and allocator refuse any other index with "habana active device: N != 0"; the
memory bindings ignore the index). ``torch.hpu.set_device`` chooses the module through
``HLS_MODULE_ID`` before the device is acquired, with the real module's assertions."""

from __future__ import annotations

import pytest


def test_other_indices_fail_with_the_real_text_and_accelerate_sees_one_device(run):
    out = run("""
        import torch
        x = torch.ones(2, device="hpu")
        for index, make in ((1, lambda: torch.zeros(2, device="hpu:1")),
                            (3, lambda: x.to("hpu:3")),
                            (1, lambda: torch.tensor(0, device=torch.device("hpu", 1)))):
            try:
                make()
            except RuntimeError as exc:
                # the bridge's words, nothing added (HPUGuardImpl.h)
                assert str(exc).splitlines()[0] == f"habana active device: {index} != 0", exc
            else:
                raise AssertionError("a tensor on another index was created")
        assert torch.hpu.device_count() == 8 and torch.hpu.current_device() == 0
        # every index answers memory queries for the acquired device, as the bindings do
        assert torch.hpu.mem_get_info(5) == torch.hpu.mem_get_info(0)
        assert torch.hpu.memory_allocated(7) == torch.hpu.memory_allocated() > 0
        try:
            torch.hpu.memory_allocated(8)
        except AssertionError as exc:
            assert str(exc) == "Invalid device id"
        else:
            raise AssertionError("index 8 of 8 devices was accepted")
        from accelerate.utils.modeling import get_max_memory
        memory = get_max_memory()
        assert sorted(k for k in memory if isinstance(k, int)) == [0], memory
        y = torch.randn(4, device="hpu", requires_grad=True)
        (y * y).sum().backward()
        assert y.grad.device == torch.device("hpu", 0)
        t = torch.hpu.FloatTensor([1, 2])
        assert t.dtype == torch.float32 and t.device.type == "hpu"
        assert torch.hpu.LongTensor([3]).dtype == torch.int64
        for bad in (dict(dtype=torch.int32), dict(device="cpu")):
            try:
                torch.hpu.FloatTensor([1], **bad)
            except RuntimeError as exc:
                assert "legacy constructor expects" in str(exc)
            else:
                raise AssertionError(f"{bad} was accepted")
        print("ok")
    """)
    assert "ok" in out.stdout


@pytest.mark.parametrize(
    ("env", "call", "expected"),
    [
        # 8 devices, nothing set: the index maps to a module id, exported before acquisition
        ({}, "torch.hpu.set_device(3)", "HLS_MODULE_ID=3 module=3"),
        ({"HABANA_VISIBLE_MODULES": "6,7"}, "torch.hpu.set_device('hpu:1')",
         "HLS_MODULE_ID=7 module=7"),
        # an HLS_MODULE_ID already set wins, silently, as in the real set_device
        ({"HLS_MODULE_ID": "5"}, "torch.hpu.set_device(2)", "HLS_MODULE_ID=5 module=5"),
        # fewer than 8 devices and neither variable: only index 0 is meaningful
        ({"HPU_PLUGIN_EMULATE_DEVICES": "2"}, "torch.hpu.set_device(0)",
         "HLS_MODULE_ID=None module=0"),
        ({"HPU_PLUGIN_EMULATE_DEVICES": "2"}, "torch.hpu.set_device(1)",
         "AssertionError: As HABANA_VISIBLE_MODULES is not provided, the only supported"),
        ({"HABANA_VISIBLE_MODULES": "0,1"}, "torch.hpu.set_device(5)",
         "AssertionError: Trying to open device with idx=5 when only [0, 1]"),
        # once a tensor exists the device is acquired: a later selection moves nothing
        ({}, "torch.ones(1, device='hpu'); torch.hpu.set_device(4)",
         "HLS_MODULE_ID=4 module=0"),
        ({}, "torch.hpu.current_device(); torch.hpu.set_device(4)", "HLS_MODULE_ID=4 module=0"),
    ],
)
def test_set_device_follows_the_real_module(run, env, call, expected):
    out = run(f"""
        import os
        import torch
        try:
            {call}
        except AssertionError as exc:
            print(f"AssertionError: {{exc}}")
        else:
            module = torch.hpu.get_device_properties().module_id
            print(f"HLS_MODULE_ID={{os.environ.get('HLS_MODULE_ID')}} module={{module}}")
            assert torch.hpu.current_device() == 0
    """, env)
    assert expected in out.stdout, out.stdout
