"""The bridge names that code written for Gaudi by others uses exist on the emulator.

consumer_surface/surface.json lists every ``habana_frameworks`` / ``torch.hpu`` /
``torch.ops.hpu`` name the pinned releases of DeepSpeed, optimum-habana, lightning-habana,
sentence-transformers, diffusers, bitsandbytes, Transformers, Accelerate and Intel Neural
Compressor use (written by ``python -m consumer_surface extract``). Each is resolved in a
fresh emulated interpreter, as the consumer reaches it; a missing name must be listed in
consumer_surface/left_out.json with its reason.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
from processes import emulated, run

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from consumer_surface.coverage import LEFT_OUT, SURFACE, load, tallies, uncounted  # noqa: E402
from consumer_surface.names import bridge_uses  # noqa: E402
from consumer_surface.sources import CONSUMERS  # noqa: E402

#: Issue 20's targets: of all distinct names, and of each consumer's.
ALL_SHARE = 0.95
CONSUMER_SHARE = 0.90


@pytest.fixture(scope="module")
def errors() -> dict[str, str | None]:
    # Lazy mode: the bridge's default, in which it offers the HPU-graph API.
    done = run([sys.executable, "-m", "consumer_surface", "resolve"],
               emulated(PT_HPU_LAZY_MODE="1"),
               timeout=300, cwd=REPO, check=True)
    return json.loads(done.stdout)


def test_the_surface_file_is_of_the_pinned_releases():
    surface = load(SURFACE)["consumers"]
    assert list(surface) == [consumer.key for consumer in CONSUMERS]
    assert all(surface.values()), "a consumer without a single bridge name: extraction broke"


def test_every_missing_name_is_listed_with_its_reason(errors):
    left_out = load(LEFT_OUT)
    unlisted = {name: error for name, error in errors.items()
                if error is not None and not uncounted(name, left_out)
                and name not in left_out["missing"]}
    assert unlisted == {}, "add them to the emulator, or to left_out.json with the reason"
    assert all(reason.strip() for reason in left_out["missing"].values())


def test_no_name_listed_as_missing_is_present(errors):
    left_out = load(LEFT_OUT)
    listed = [*left_out["missing"], *left_out["not_in_bridge"]]
    present = [name for name in listed if errors.get(name, "") is None]
    assert present == [], "the emulator has them now: remove them from left_out.json"


def test_the_extractor_resolves_every_spelling():
    source = textwrap.dedent("""
        import torch
        import habana_frameworks.torch.core as htcore
        from habana_frameworks.torch.hpex.kernels import FusedSDPA
        import importlib

        class Accelerator:
            def __init__(self):
                import habana_frameworks.torch.hpu as hpu
                self.hpu = hpu

            def sync(self):
                self.hpu.random.manual_seed(0)
                return self.hpu.Event().record

        def step(model):
            htcore.mark_step()
            torch.hpu.memory_stats(0)["bytes"]
            torch.ops.hpu.optimizer_adamw(model)
            torch.hpu.patched = True
            if hasattr(torch.hpu, "wrap_in_hpu_graph") and getattr(htcore, "is_lazy", None):
                importlib.import_module("habana_frameworks.torch.utils.experimental")
            FusedSDPA.apply(1, 2)
            torch.nn.Linear(1, 1)
    """)
    kinds: dict[str, set[str]] = {}
    for use in bridge_uses(source):
        kinds.setdefault(use.name, set()).add(use.kind)
    assert kinds == {
        "habana_frameworks.torch.core": {"import"},
        "habana_frameworks.torch.hpex.kernels.FusedSDPA": {"import"},
        "habana_frameworks.torch.hpex.kernels.FusedSDPA.apply": {"attribute"},
        "habana_frameworks.torch.hpu": {"import"},
        "habana_frameworks.torch.hpu.random.manual_seed": {"attribute"},
        "habana_frameworks.torch.hpu.Event": {"attribute"},
        "habana_frameworks.torch.core.mark_step": {"attribute"},
        "habana_frameworks.torch.core.is_lazy": {"probe"},
        "habana_frameworks.torch.utils.experimental": {"string"},
        "torch.hpu.memory_stats": {"attribute"},
        "torch.hpu.wrap_in_hpu_graph": {"probe"},
        "torch.ops.hpu.optimizer_adamw": {"attribute"},
    }


@pytest.mark.parametrize("consumer", [*(c.key for c in CONSUMERS), "all"])
def test_share_of_names_present(errors, consumer):
    found = tallies(errors, load(SURFACE), load(LEFT_OUT))[consumer]
    wanted = ALL_SHARE if consumer == "all" else CONSUMER_SHARE
    assert found.share >= wanted, (found.present, found.total, found.missing)


def test_extracting_one_release_names_a_pinned_one(tmp_path):
    """``extract neural-compressor`` re-reads one release and keeps the others' entries; a
    name that is not pinned is refused before anything is downloaded or written."""
    from consumer_surface.extract import extract

    target = tmp_path / "surface.json"
    target.write_text(SURFACE.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(ValueError, match=r"not pinned in consumer_surface/sources\.py"):
        extract(target, only=("neural-compresor",))
    assert target.read_text(encoding="utf-8") == SURFACE.read_text(encoding="utf-8")
