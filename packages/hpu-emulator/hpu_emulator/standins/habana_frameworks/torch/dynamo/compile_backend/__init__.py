"""Stand-in for ``habana_frameworks.torch.dynamo.compile_backend``: importing it registers
``hpu_backend`` with dynamo, as the real package's import of ``.backends`` does, and the
per-graph fallback answers and graph log of ``.shared_layer`` and ``.passes``."""

from . import backends, config, passes, shared_layer  # noqa: F401
