"""Stand-in for ``habana_frameworks.torch.hpu``: the very module registered as ``torch.hpu``."""

import sys

import torch

sys.modules[__name__] = torch.hpu
