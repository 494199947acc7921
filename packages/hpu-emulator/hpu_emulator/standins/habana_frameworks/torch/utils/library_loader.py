"""Stand-in for ``habana_frameworks.torch.utils.library_loader``."""

from hpu_emulator import runtime


def is_habana_available() -> bool:
    return runtime.started()
