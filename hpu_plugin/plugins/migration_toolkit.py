"""GPU Migration Toolkit: the plugin's decisions follow the toolkit's when it is loaded.

With ``PT_HPU_GPU_MIGRATION=1`` Intel's toolkit runs code written for CUDA on Gaudi: it
starts ``init_process_group("nccl")`` as HCCL, answers ``nccl`` to ``get_backend()`` and
turns the default ``inductor`` backend into ``hpu_backend``. Without this plugin the DDP
selector would refuse the ``nccl`` the user's CUDA script names, which the toolkit is about
to run as HCCL; this plugin decides first, so the two agree. The compile decision needs
nothing here: the compile plugin already chooses ``hpu_backend`` as the toolkit does.
Turned off (``HPU_PLUGIN_DISABLE=gpu_migration``), the first-party rules apply unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from hpu_plugin.gaudi import migration
from hpu_plugin.hookspecs import hookimpl

#: The job fact every rank must share: a rank with the toolkit and one without would
#: disagree on what ``nccl``, ``cuda`` and ``get_backend()`` mean.
FACT = "GPU Migration Toolkit"


@hookimpl(tryfirst=True)
def hpu_ddp_backend(requested: str | None) -> str | None:
    if requested is None or not migration.loaded():
        return None
    return migration.DISTRIBUTED.get(requested)  # nccl: the toolkit runs it as hccl


@hookimpl
def hpu_job_facts(environ: Mapping[str, str]) -> dict[str, str] | None:
    del environ  # the fact is whether the toolkit is loaded, not what the variable says
    return {FACT: "loaded" if migration.loaded() else "off"}

