"""Stand-in for ``habana_frameworks.torch.dynamo.compile_backend.backends``: ``hpu_backend``
registered with dynamo's backend registry at import, as the real module's decorator does.

The backend is the emulator's (``hpu_emulator.dynamo``): AOT autograd over eager kernels,
each graph counted by the recipe-cache model.
"""

from torch._dynamo.backends import registry as _registry

from hpu_emulator import dynamo as _dynamo

hpu_backend = _dynamo.hpu_backend
_dynamo.register(_registry)

__all__ = ["hpu_backend"]
