"""Stand-in for ``habana_frameworks.torch.dynamo.compile_backend``: importing it registers
``hpu_backend`` with dynamo, as the real package's import of ``.backends`` does."""

from . import backends, config  # noqa: F401
