"""Host adapters: make torch, Transformers and Accelerate ask the registry.

Each adapter finds one host's decision points and routes them through
``hpu_plugin.registry``; it never calls a plugin directly. Adapters are version-guarded:
one that cannot find what it expects logs one line naming the host and version and stays
out.
"""

from __future__ import annotations

from hpu_plugin.registry import Registry


def install(registry: Registry) -> None:
    """Install every adapter; called once by activation when Gaudi is ready."""
