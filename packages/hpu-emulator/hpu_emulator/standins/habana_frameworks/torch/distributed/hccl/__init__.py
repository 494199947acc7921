"""Stand-in for ``habana_frameworks.torch.distributed.hccl``.

As the real module does at import time: maps Open MPI's rank variables, sets the rendezvous
defaults, pins ``HLS_MODULE_ID`` for a local rank, sets ``ID``, and registers the ``hccl``
process-group backend for ``hpu`` (Gloo underneath; CPU tensors are refused, as by HCCL).
"""

from hpu_emulator.hccl import initialize_distributed_hpu, register

initialize_distributed_hpu()
register()

__all__ = ["initialize_distributed_hpu"]
