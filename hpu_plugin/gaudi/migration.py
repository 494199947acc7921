"""Intel's GPU Migration Toolkit: the facts the plugin, the emulator and doctor share.

The toolkit (``habana_frameworks.torch.gpu_migration``, part of the Gaudi software) maps code
written for CUDA to Gaudi at run time. ``import habana_frameworks.torch`` imports it when
``PT_HPU_GPU_MIGRATION`` is on (the bridge's ``habana_frameworks/torch/__init__.py``);
older releases asked for ``import habana_frameworks.torch.gpu_migration`` in the script,
which still works. What it maps is Intel's table (Gaudi docs, "GPU Migration Toolkit APIs":
each call is ``hpu_match``, ``hpu_modified`` or ``hpu_mismatch``); the decisions below are
the ones the plugin also makes, so that the two never disagree. No torch here.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from hpu_plugin.gaudi.environment import EnvironmentValueError, parse_bridge_bool

#: The switch ``import habana_frameworks.torch`` reads (Gaudi docs, "Runtime Environment
#: Variables": default off).
VARIABLE = "PT_HPU_GPU_MIGRATION"
#: The toolkit's own log switch: 1 most verbose, 3 least; unset: no log.
LOG_LEVEL = "GPU_MIGRATION_LOG_LEVEL"
#: With ``1``, float16 requested through mapped calls becomes bfloat16.
FP16_TO_BF16 = "PT_HPU_CONVERT_FP16_TO_BF16_FOR_MIGRATION"
#: The module the Gaudi software ships it as.
MODULE = "habana_frameworks.torch.gpu_migration"

#: ``init_process_group`` / ``new_group`` backends the toolkit runs as HCCL (None included:
#: a group started with no backend is HCCL under the toolkit).
DISTRIBUTED = {"nccl": "hccl"}
#: What ``torch.distributed.get_backend()`` answers for an HCCL group under the toolkit.
REPORTED_BACKEND = {"hccl": "nccl"}
#: Compile backends the toolkit replaces by ``hpu_backend`` (Gaudi "PyTorch Support Matrix":
#: ``torch.compile(backend="inductor")`` "automatically converted using GPU Migration Toolkit").
COMPILE = {"inductor": "hpu_backend"}


def requested(environ: Mapping[str, str]) -> bool:
    """Does this process ask for the toolkit through the environment? Read as the bridge
    reads this flag of its own; a value it would stop on raises ``EnvironmentValueError``."""
    return bool(parse_bridge_bool(
        VARIABLE, environ.get(VARIABLE), "'1' (the toolkit loads) or '0'",
        f"set {VARIABLE}=1 to run CUDA-written code through the toolkit, or unset it"))


def loaded() -> bool:
    """Is the toolkit imported in this process (by the variable or by the script itself)?"""
    return MODULE in sys.modules


def faults(environ: Mapping[str, str]) -> list[EnvironmentValueError]:
    """The toolkit's switch, if it holds a value the Gaudi software stops on."""
    try:
        requested(environ)
    except EnvironmentValueError as exc:
        return [exc]
    return []


def active(environ: Mapping[str, str]) -> bool:
    """Is the toolkit in force, or about to be (the variable is read when Gaudi's software is
    imported, which may come after the caller asks)?"""
    return loaded() or requested(environ)


def ddp_backend(requested_backend: str | None) -> str | None:
    """The backend a group asked for as ``requested_backend`` runs on under the toolkit."""
    if requested_backend is None:
        return "hccl"
    return DISTRIBUTED.get(requested_backend)


def state(environ: Mapping[str, str]) -> str:
    """One word for diagnostics: ``loaded``, ``requested`` (the variable is on but the Gaudi
    software was imported before it was set, so the toolkit did not load), ``off``, or
    ``invalid`` (a value the Gaudi software stops on; ``doctor`` says which)."""
    if loaded():
        return "loaded"
    try:
        return "requested" if requested(environ) else "off"
    except EnvironmentValueError:
        return "invalid"
