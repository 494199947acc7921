"""Stand-in for ``habana_frameworks.torch.gpu_migration``, Intel's GPU Migration Toolkit.

Imported by the stand-in ``habana_frameworks.torch`` when ``PT_HPU_GPU_MIGRATION`` is on, or
by a script itself (the older way to ask for it); either way it maps CUDA calls to Gaudi
from here on (``hpu_emulator.gpu_migration`` says what it maps).
"""

from hpu_emulator.gpu_migration import activate

activate()
