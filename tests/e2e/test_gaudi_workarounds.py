"""Transformers' own Gaudi workarounds still happen with the plugin, for ``hpu`` tensors only.

The plugin replaces ``transformers.is_torch_hpu_available``; the workarounds the original
installs (int64 gather as int32, scatter with a self-aliasing ``src``, cholesky jitter) are
HPU kernels instead of Python wrappers, in place from activation on Gaudi. The emulator
models the fault the gather workaround avoids (an int64 gather fails to compile on Gaudi),
so its effect is visible here.
"""

from __future__ import annotations

import pytest

from .conftest import OUTCOME, emulated_env, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("emulator")]

SCRIPT = OUTCOME + """
import sys
import torch
from torch.profiler import profile


def ops(fn):
    with profile() as prof:
        try:
            fn()
        except RuntimeError:
            pass
    return {event.name for event in prof.events()}


x = torch.arange(12).reshape(3, 4) * 7
i = torch.tensor([[0, 1], [2, 3], [1, 1]])
hx, hi = x.to("hpu"), i.to("hpu")
print("gather_before=" + outcome(lambda: torch.gather(hx, 1, hi)))

import transformers
from transformers.utils import import_utils  # the plugin replaced it on import
print("transformers=" + transformers.__version__)
print("available=" + str(import_utils.is_torch_hpu_available()))
print("gather_cpu=" + outcome(lambda: torch.gather(x, 1, i)))
print("gather_hpu=" + outcome(lambda: torch.gather(hx, 1, hi)))
print("method_hpu=" + outcome(lambda: hx.gather(1, hi)))
print("take_hpu=" + outcome(lambda: torch.take_along_dim(hx, hi, 1)))
try:
    print("gather_dtype=" + str(torch.gather(hx, 1, hi).dtype))
except RuntimeError:
    print("gather_dtype=none")
print("gather_float=" + outcome(lambda: torch.gather(hx.float(), 1, hi)))

# scatter whose src is the input: the workaround gives the kernel a copy
s = torch.arange(12.0).reshape(3, 4)
idx = torch.tensor([[3, 2, 1, 0]] * 3)
hs, hidx = s.to("hpu"), idx.to("hpu")
print("scatter_cpu=" + outcome(lambda: torch.scatter(s, 1, idx, s)))
print("scatter_hpu=" + outcome(lambda: torch.scatter(hs, 1, hidx, hs)))
print("scatter_reduce_hpu=" + outcome(lambda: hs.scatter(1, hidx, hs, reduce="add")))
print("scatter_clone_hpu=" + str("aten::clone" in ops(lambda: torch.scatter(hs, 1, hidx, hs))))
other = hs + 1
print("scatter_clone_other=" + str("aten::clone" in ops(lambda: torch.scatter(hs, 1, hidx, other))))
print("scatter_clone_cpu=" + str("aten::clone" in ops(lambda: torch.scatter(s, 1, idx, s))))

# cholesky: a result with NaN is retried with jitter on the diagonal, on hpu only
a = torch.tensor([[4.0, 2.0], [2.0, 3.0]])
print("cholesky_cpu=" + outcome(lambda: torch.linalg.cholesky(a)))
print("cholesky_hpu=" + outcome(lambda: torch.linalg.cholesky(a.to("hpu"))))
nan = torch.full((2, 2), float("nan"))
print("jitter_pd_hpu=" + str("aten::eye" in ops(lambda: torch.linalg.cholesky(a.to("hpu")))))
print("jitter_nan_hpu=" + str("aten::eye" in ops(lambda: torch.linalg.cholesky(nan.to("hpu")))))
print("jitter_nan_cpu=" + str("aten::eye" in ops(lambda: torch.linalg.cholesky(nan))))

# CPU calls are torch's own: the builtins, and no Python frame while they run
print("builtins=" + str(torch.gather is torch._C._VariableFunctions.gather
                        and torch.Tensor.gather is torch._C.TensorBase.gather
                        and torch.scatter is torch._C._VariableFunctions.scatter
                        and torch.take_along_dim is torch._C._VariableFunctions.take_along_dim
                        and type(torch.linalg.cholesky).__name__ == "builtin_function_or_method"))


def python_frames(fn):
    # Python frames entered while fn runs, other than its own
    frames = []

    def watch(frame, event, arg):
        if event == "call" and frame.f_code is not fn.__code__:
            frames.append(frame.f_code.co_name)

    sys.setprofile(watch)
    try:
        fn()
    except RuntimeError:  # the modelled fault, where Transformers has no workaround
        pass
    finally:
        sys.setprofile(None)
    return len(frames)


def cpu_ops():
    torch.gather(x, 1, i)
    x.gather(1, i)
    torch.take_along_dim(x, i, 1)
    torch.scatter(s, 1, idx, s)
    torch.linalg.cholesky(a)


print("frames_cpu=" + str(python_frames(cpu_ops)))
print("frames_hpu=" + str(python_frames(lambda: torch.gather(hx, 1, hi))))

from hpu_plugin import hosts

hosts.uninstall()  # the workarounds are undone with the other patches
print("gather_undone=" + outcome(lambda: torch.gather(hx, 1, hi)))
print("frames_hpu_undone=" + str(python_frames(lambda: torch.gather(hx.float(), 1, hi))))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("workarounds")
    return run(SCRIPT, emulated_env(tmp)).lines()


def _release(report: dict[str, str]) -> tuple[int, int]:
    major, minor = report["transformers"].split(".")[:2]
    return int(major), int(minor)


def test_what_transformers_does_is_what_the_plugin_does(report):
    """Transformers 4.51 and 4.52 work around none of these on Gaudi2/3; neither does the
    plugin there (the fault stays, as it would on Gaudi with Transformers alone)."""
    release = _release(report)
    assert report["available"] == "True"
    if release < (4, 53):
        assert report["gather_hpu"] == "synStatus26"
        assert report["scatter_clone_hpu"] == "False"
        assert report["jitter_nan_hpu"] == "False"
    elif release < (4, 54):
        assert report["gather_hpu"] == report["gather_cpu"]
        assert report["scatter_clone_hpu"] == "False"


def test_int64_gather_fails_on_gaudi_without_the_workaround(report):
    # the emulator models the compile failure the Transformers workaround avoids
    assert report["gather_undone"] == "synStatus26"


def test_the_workarounds_are_in_place_from_activation(report):
    """Before anything imports Transformers or asks ``is_torch_hpu_available()`` (a library
    that finds Gaudi on its own, as sentence-transformers does), ``hpu`` ops already get
    what the installed Transformers release would give them."""
    assert report["gather_before"] == report["gather_hpu"]
    if _release(report) >= (4, 53):
        assert report["gather_before"] == report["gather_cpu"]


def test_int64_gather_and_take_along_dim_run_as_int32_on_hpu(report):
    if _release(report) < (4, 53):
        pytest.skip(f"Transformers {report['transformers']} has no gather workaround")
    expected = report["gather_cpu"]
    assert expected == "[[0, 7], [42, 49], [63, 63]]"
    assert report["gather_hpu"] == report["method_hpu"] == report["take_hpu"] == expected
    assert report["gather_dtype"] == "torch.int64"
    assert report["gather_float"] == "[[0.0, 7.0], [42.0, 49.0], [63.0, 63.0]]"


def test_scatter_clones_a_self_aliasing_src_on_hpu_only(report):
    if _release(report) < (4, 54):
        pytest.skip(f"Transformers {report['transformers']} has no scatter workaround")
    assert report["scatter_hpu"] == report["scatter_cpu"]
    assert report["scatter_hpu"].startswith("[[3.0, 2.0, 1.0, 0.0]")
    assert report["scatter_reduce_hpu"].startswith("[[3.0, 3.0, 3.0, 3.0]")
    assert report["scatter_clone_hpu"] == "True"
    assert report["scatter_clone_other"] == "False"  # src is not the input: no copy
    assert report["scatter_clone_cpu"] == "False"


def test_cholesky_retries_with_jitter_when_the_result_has_nan_on_hpu(report):
    if _release(report) < (4, 54):
        pytest.skip(f"Transformers {report['transformers']} has no cholesky workaround")
    assert report["cholesky_hpu"] == report["cholesky_cpu"]
    assert report["jitter_pd_hpu"] == "False"  # a good factor is returned as it is
    assert report["jitter_nan_hpu"] == "True"
    assert report["jitter_nan_cpu"] == "False"


def test_cpu_ops_are_torchs_own(report):
    assert report["builtins"] == "True"
    assert report["frames_cpu"] == "0"
    # the emulator's fault model is C++, as the bridge's kernels are; the same check sees the
    # plugin's Python kernel on hpu where Transformers has a workaround, so it can fail
    if _release(report) >= (4, 53):
        assert int(report["frames_hpu"]) > 0
        assert report["frames_hpu_undone"] == "0"
    else:
        assert report["frames_hpu"] == "0"
