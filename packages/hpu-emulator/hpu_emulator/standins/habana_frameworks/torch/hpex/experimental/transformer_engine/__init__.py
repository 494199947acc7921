"""Stand-in for ``habana_frameworks.torch.hpex.experimental.transformer_engine``.

As in the bridge, this is Intel Gaudi's Transformer Engine (``intel_transformer_engine``)
under the bridge's name: its names are re-exported and its submodules registered as
submodules of this package, so ``...transformer_engine.recipe`` imports.
"""

import importlib
import sys
from types import ModuleType

_te = importlib.import_module("intel_transformer_engine")

for _name in dir(_te):
    if not _name.startswith("__"):
        _value = getattr(_te, _name)
        if isinstance(_value, ModuleType):
            sys.modules[f"{__name__}.{_name}"] = _value
        globals()[_name] = _value

__all__ = [name for name in dir(_te) if not name.startswith("__")]
