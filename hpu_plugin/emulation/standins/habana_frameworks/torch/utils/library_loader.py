"""Stand-in for ``habana_frameworks.torch.utils.library_loader``."""

from hpu_plugin.emulation import runtime


def is_habana_available() -> bool:
    return runtime.started()
