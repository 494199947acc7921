"""Stand-in for ``intel_transformer_engine``, Intel Gaudi's Transformer Engine: fp8 training
on Gaudi2 and later, with float8 numerics emulated by torch's float8 dtypes and the emulated
``torch.ops.hpu`` fp8 casts and GEMM. Accelerate imports it by this name on HPU; the bridge
re-exports it as ``habana_frameworks.torch.hpex.experimental.transformer_engine``. Its
distribution metadata (``intel-transformer-engine``) sits beside it, so that it is found
while emulating and never otherwise.

Provided: ``Linear``, ``fp8_autocast``, ``recipe`` (``DelayedScaling``, ``Format``), ``fp8``
(``is_fp8_available``, ``FP8GlobalStateManager``, ``get_fp8_te_dtype``). Not provided: the
other Transformer Engine modules (``LayerNormLinear``, ``LayerNormMLP``, ``FusedAttention``,
...), distributed amax reduction and activation recompute.
"""

from . import fp8, recipe
from .fp8 import FP8GlobalStateManager, fp8_autocast, is_fp8_available
from .module import Linear

__all__ = ["FP8GlobalStateManager", "Linear", "fp8", "fp8_autocast", "is_fp8_available",
           "recipe"]
