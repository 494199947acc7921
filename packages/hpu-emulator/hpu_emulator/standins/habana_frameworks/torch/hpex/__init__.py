"""Stand-in for ``habana_frameworks.torch.hpex``: Gaudi's fused kernels, normalizations and
optimizers, over the emulated ``torch.ops.hpu`` ops (``hpu_emulator.kernels``)."""
