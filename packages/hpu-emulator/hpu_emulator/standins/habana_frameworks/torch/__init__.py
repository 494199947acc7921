"""Stand-in for ``habana_frameworks.torch``: the same import-time effects as the real one."""

import os

import torch

from hpu_emulator import runtime

if not runtime.started():
    raise ImportError(
        "habana_frameworks.torch (hpu_plugin emulator) needs the emulator running: "
        "set HPU_PLUGIN_EMULATE before importing torch"
    )

os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"

import habana_frameworks.autoload as _autoload

_autoload.is_loaded = True

from habana_frameworks.torch import core, hpu  # noqa: E402, F401
from habana_frameworks.torch.distributed import hccl  # noqa: E402, F401

__version__ = torch.__version__

from hpu_emulator import bridge_flags as _flags  # noqa: E402

if _flags.read("PT_HPU_GPU_MIGRATION"):  # as the real package: the toolkit comes with it
    import habana_frameworks.torch.gpu_migration  # noqa: F401
