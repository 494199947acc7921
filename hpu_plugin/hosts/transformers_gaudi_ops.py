"""What Transformers' ``is_torch_hpu_available`` does to torch on Gaudi, kept as HPU kernels.

The plugin replaces ``is_torch_hpu_available`` (its answer comes from the registry), so the
original's side effects on Gaudi must happen here instead. What the original does, by release
(read in the wheels of 4.51.3, 4.52.4, 4.53.0, 4.53.3, 4.54.1, 4.55.0, 4.57.0 and 5.24.0):

- 4.54 to 5.x: ``torch.gather``/``Tensor.gather`` and ``torch.take_along_dim`` run an int64
  input as int32 and cast the result back (Gaudi fails to compile an int64 gather: "Graph
  compile failed with synStatus 26"); ``torch.scatter``/``Tensor.scatter`` clone ``src`` when
  it is the input itself; ``torch.linalg.cholesky`` retries with 1e-9 added to the diagonal
  when its result has NaN ("barely" positive-definite inputs).
- 4.53: only ``Tensor.gather`` of an int64 input is rerouted (through advanced indexing).
  The plugin applies the 4.54 form there too: same values for int32-range data.
- 4.51 to 4.53, first-generation Gaudi only (``htexp._get_device_type()`` is
  ``synDeviceGaudi``): ``Tensor.masked_fill_`` of an int64 tensor becomes
  ``self[mask] = value`` (Gaudi1 fails to create the node "masked_fill_fwd_i64" with
  synStatus 26). Kept here for those releases on that generation, for both overloads.
- ``torch.compile`` defaulting to ``hpu_backend`` is the compile plugin's.

One workaround is the plugin's own, for code Transformers 5 runs on every device but CPU and
MPS: ``torch.histc`` of an integer tensor (the mixture-of-experts models' auxiliary loss
counts each expert's tokens so when no attention mask is given). The bridge has no HPU
kernel for ``aten::histc``, and its CPU fallback's kernel refuses integers ("histogram_cpu"
not implemented for 'Int'); the count runs on a float32 copy, as Transformers counts on the
CPU, and comes back in the input's dtype, as CUDA gives it.

Transformers wraps the Python functions, which would put a Python frame on every CPU
``gather``. Here each workaround is a kernel for the HPU dispatch key that does the
workaround and calls the kernel registered before it (``torch.library.get_kernel``: the
Gaudi bridge's kernel, or the emulator's fallback), so CPU ops stay torch's own. Kernel
level also covers more spellings than Transformers' patch does (``Tensor.take_along_dim``,
``torch.linalg.cholesky_ex``); the workarounds change no result for the inputs Gaudi handles.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable
from typing import Any

from hpu_plugin.patching import Patches
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

#: The first Transformers release whose availability check works around an op on Gaudi.
SINCE = (4, 51)
CHOLESKY_JITTER = 1e-9

_lock = threading.Lock()
_library: Any = None


def _gather(original: Any) -> Callable[..., Any]:
    import torch

    def gather(keyset: Any, self: Any, dim: int, index: Any, *, sparse_grad: bool = False) -> Any:
        if self.dtype == torch.int64:
            narrow = original.call_boxed(keyset, self.to(torch.int32), dim, index,
                                         sparse_grad=sparse_grad)
            return narrow.to(torch.int64)
        return original.call_boxed(keyset, self, dim, index, sparse_grad=sparse_grad)

    return gather


def _scatter(original: Any) -> Callable[..., Any]:
    def scatter(keyset: Any, self: Any, dim: int, index: Any, src: Any, **reduce: Any) -> Any:
        if src is self:
            src = src.clone()
        return original.call_boxed(keyset, self, dim, index, src, **reduce)

    return scatter


def _cholesky_ex(original: Any) -> Callable[..., Any]:
    import torch

    def linalg_cholesky_ex(keyset: Any, self: Any, *, upper: bool = False,
                           check_errors: bool = False) -> Any:
        result = original.call_boxed(keyset, self, upper=upper, check_errors=check_errors)
        if torch.isnan(result[0]).any():
            jitter = torch.eye(self.size(-1), dtype=self.dtype, device=self.device)
            result = original.call_boxed(keyset, self + jitter * CHOLESKY_JITTER, upper=upper,
                                         check_errors=check_errors)
        return result

    return linalg_cholesky_ex


def _masked_fill_(original: Any) -> Callable[..., Any]:
    import torch

    def masked_fill_(keyset: Any, self: Any, mask: Any, value: Any) -> Any:
        if self.dtype == torch.int64:
            self[mask] = value  # index_put_: the HPU key is below autograd here already
            return self
        return original.call_boxed(keyset, self, mask, value)

    return masked_fill_


def _histc(original: Any) -> Callable[..., Any]:
    import torch

    def histc(keyset: Any, self: Any, bins: int = 100, min: Any = 0, max: Any = 0) -> Any:
        if self.is_floating_point():
            return original.call_boxed(keyset, self, bins, min, max)
        counts = original.call_boxed(keyset, self.to(torch.float32), bins, min, max)
        return counts.to(self.dtype)

    return histc


#: aten op (with overload) -> (first Transformers release doing it, the workaround around
#: the kernel registered before it).
WORKAROUNDS: dict[str, tuple[tuple[int, int], Callable[[Any], Callable[..., Any]]]] = {
    "gather": ((4, 53), _gather),
    "scatter.src": ((4, 54), _scatter),
    "scatter.reduce": ((4, 54), _scatter),
    "linalg_cholesky_ex": ((4, 54), _cholesky_ex),
    "histc": ((4, 51), _histc),  # the plugin's own: with every release it supports
}

#: aten op -> (first release, first release without it, workaround): first-generation Gaudi
#: only, as Transformers decides with ``htexp._get_device_type()``.
GAUDI1_WORKAROUNDS: dict[
    str, tuple[tuple[int, int], tuple[int, int], Callable[[Any], Callable[..., Any]]]
] = {
    "masked_fill_.Scalar": ((4, 51), (4, 54), _masked_fill_),
    "masked_fill_.Tensor": ((4, 51), (4, 54), _masked_fill_),
}


def _first_generation() -> bool:
    """Whether this is first-generation Gaudi, asked where Transformers asks."""
    try:
        import habana_frameworks.torch.utils.experimental as htexp
    except ImportError:  # no Gaudi software: Transformers would not get this far either
        return False
    return bool(htexp._get_device_type() == htexp.synDeviceType.synDeviceGaudi)


def _chosen(release: tuple[int, ...]) -> dict[str, Callable[[Any], Callable[..., Any]]]:
    """The workarounds Transformers ``release``'s availability check makes on this device."""
    chosen = {op: make for op, (since, make) in WORKAROUNDS.items() if release >= since}
    gaudi1 = {op: make for op, (since, until, make) in GAUDI1_WORKAROUNDS.items()
              if since <= release < until}
    if gaudi1 and _first_generation():
        chosen.update(gaudi1)
    return chosen


def installed() -> bool:
    return _library is not None


def uninstall() -> None:
    """The kernels registered before ours become active again."""
    global _library
    with _lock:
        if _library is not None:
            _library._destroy()
            _library = None


def install(patches: Patches, transformers_release: tuple[int, ...]) -> bool:
    """Register the workarounds on the HPU key once; report (once) what could not be."""
    global _library
    if transformers_release < SINCE:
        return False
    with _lock:
        if _library is not None:
            return True
        import torch

        get_kernel = getattr(torch.library, "get_kernel", None)
        if get_kernel is None:
            say_once("gaudi-ops-torch", logging.WARNING,
                     "hpu_plugin: torch %s has no torch.library.get_kernel; Transformers' "
                     "Gaudi workarounds (int64 gather, scatter, cholesky) and the integer "
                     "histc are not installed.",
                     torch.__version__)
            return False
        library = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings():  # "Overriding a previously registered kernel"
            warnings.simplefilter("ignore", UserWarning)
            for op, workaround in _chosen(transformers_release).items():
                kernel = workaround(get_kernel(f"aten::{op}", "HPU"))
                library.impl(op, kernel, "HPU", with_keyset=True)
        _library = library
    patches.on_undo(uninstall)
    return True
