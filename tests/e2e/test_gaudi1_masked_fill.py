"""Transformers 4.51-4.53's first-generation Gaudi workaround still happens with the plugin.

On Gaudi1, ``masked_fill_`` of an int64 tensor fails ("masked_fill_fwd_i64 with synStatus
26"; huggingface/transformers issue 39175 lists it as Gaudi1 only). Transformers 4.51 to
4.53 work around it in ``is_torch_hpu_available`` on Gaudi1 only (``self[mask] = value``),
4.54 and later do not. The plugin replaces that function and keeps the workaround as an HPU
kernel; the emulator models the fault on its Gaudi1, so the workaround's effect shows. The
oldest matrix entry (Transformers 4.51.3) runs the workaround; newer releases check that the
fault stays, as it would with Transformers alone.
"""

from __future__ import annotations

import pytest

from .conftest import OUTCOME, emulated_env, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("emulator")]

SCRIPT = OUTCOME + """
import torch


x = torch.arange(6) * 5
m = torch.tensor([True, False, True, False, False, True])
hx, hm = x.to("hpu"), m.to("hpu")
print("fill_cpu=" + outcome(lambda: x.clone().masked_fill_(m, -1)))
print("fill_before=" + outcome(lambda: hx.clone().masked_fill_(hm, -1)))

import transformers
from transformers.utils import import_utils  # the plugin replaced it on import
print("transformers=" + transformers.__version__)
print("available=" + str(import_utils.is_torch_hpu_available()))
print("fill_scalar_hpu=" + outcome(lambda: hx.clone().masked_fill_(hm, -1)))
print("fill_tensor_hpu=" + outcome(lambda: hx.clone().masked_fill_(hm, torch.tensor(-1))))
print("fill_out_of_place_hpu=" + outcome(lambda: hx.masked_fill(hm, -1)))
print("fill_float_hpu=" + outcome(lambda: hx.float().masked_fill_(hm, -1)))


def in_place():
    target = hx.clone()
    target.masked_fill_(hm, -1)  # the result is the tensor itself, filled
    return target


print("fill_in_place_hpu=" + outcome(in_place))
print("builtin=" + str(torch.Tensor.masked_fill_ is torch._C.TensorBase.masked_fill_))

from hpu_plugin import hosts

hosts.uninstall()  # the workarounds are undone with the other patches
print("fill_undone=" + outcome(lambda: hx.clone().masked_fill_(hm, -1)))
"""


def _report(tmp_path, generation: str) -> dict[str, str]:
    env = emulated_env(tmp_path)
    env["HPU_PLUGIN_EMULATE"] = generation
    return run(SCRIPT, env).lines()


def _release(report: dict[str, str]) -> tuple[int, int]:
    major, minor = report["transformers"].split(".")[:2]
    return int(major), int(minor)


@pytest.fixture(scope="module")
def gaudi1(tmp_path_factory) -> dict[str, str]:
    return _report(tmp_path_factory.mktemp("gaudi1"), "gaudi")


def test_int64_masked_fill_fails_on_gaudi1_without_the_workaround(gaudi1):
    # the emulator models the fault the Transformers workaround avoids
    assert gaudi1["fill_cpu"] == "[-1, 5, -1, 15, 20, -1]"
    assert gaudi1["fill_undone"] == "synStatus26"
    # in place from activation: before Transformers is imported, as after its check
    assert gaudi1["fill_before"] == gaudi1["fill_scalar_hpu"]
    assert gaudi1["fill_float_hpu"] == "[-1.0, 5.0, -1.0, 15.0, 20.0, -1.0]"


def test_gaudi1_masked_fill_as_transformers_does_it(gaudi1):
    assert gaudi1["available"] == "True"
    filled = ("fill_scalar_hpu", "fill_tensor_hpu", "fill_out_of_place_hpu", "fill_in_place_hpu")
    if (4, 51) <= _release(gaudi1) < (4, 54):
        # Transformers works around it there: the values are the CPU's, in place
        assert {gaudi1[key] for key in filled} == {gaudi1["fill_cpu"]}
    else:
        # later releases do not: neither does the plugin (the fault stays, as on Gaudi1)
        assert {gaudi1[key] for key in filled} == {"synStatus26"}
    assert gaudi1["builtin"] == "True"  # a kernel, not a Python wrapper on the CPU path


def test_no_masked_fill_workaround_or_fault_on_gaudi2(tmp_path):
    report = _report(tmp_path, "gaudi2")
    assert report["fill_before"] == report["fill_scalar_hpu"] == report["fill_cpu"]
    assert report["fill_out_of_place_hpu"] == report["fill_cpu"]
