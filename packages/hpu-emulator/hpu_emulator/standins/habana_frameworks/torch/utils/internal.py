"""Stand-in for ``habana_frameworks.torch.utils.internal``."""

import functools
import os


@functools.lru_cache(maxsize=1)
def is_lazy() -> bool:
    return os.getenv("PT_HPU_LAZY_MODE", "1") != "0"
