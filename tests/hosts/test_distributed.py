"""The collective backend: ``init_process_group`` and Accelerate's ``_prepare_backend``."""

from __future__ import annotations

import pytest
import torch.distributed as dist

from hpu_plugin.hookspecs import Refusal


@pytest.fixture
def store_url(tmp_path):
    return f"file://{tmp_path / 'store'}"


def test_no_backend_takes_the_hook_answer(installed, answers, store_url):
    answers.ddp_backend = "gloo"
    dist.init_process_group(init_method=store_url, rank=0, world_size=1)
    try:
        assert dist.get_backend() == "gloo"
    finally:
        dist.destroy_process_group()
    assert ("ddp", None) in answers.calls


def test_a_named_backend_is_kept(installed, answers, store_url):
    answers.ddp_backend = "mpi"  # the hook's opinion must not replace the user's
    dist.init_process_group("gloo", init_method=store_url, rank=0, world_size=1)
    try:
        assert dist.get_backend() == "gloo"
    finally:
        dist.destroy_process_group()
    assert ("ddp", "gloo") in answers.calls


def test_a_refused_backend_fails_before_any_store(installed, answers, tmp_path):
    answers.refuse_ddp = {"nccl"}
    with pytest.raises(Refusal, match="'nccl'"):
        dist.init_process_group(backend="nccl", init_method=f"file://{tmp_path / 's'}",
                                rank=0, world_size=1)
    assert not (tmp_path / "s").exists()
    assert not dist.is_initialized()


def _prepare(backend, monkeypatch):
    from accelerate.state import PartialState

    monkeypatch.setenv("LOCAL_RANK", "0")
    bare = object.__new__(PartialState)
    return PartialState._prepare_backend(bare, False, False, backend)


def test_accelerate_multi_hpu_backend_comes_from_the_hook(installed, answers, monkeypatch):
    from accelerate.utils import DistributedType

    answers.ddp_backend = "gloo"
    assert _prepare(None, monkeypatch) == ("gloo", DistributedType.MULTI_HPU)
    answers.ddp_backend = None  # no opinion: Accelerate's own default for HPU
    assert _prepare(None, monkeypatch) == ("hccl", DistributedType.MULTI_HPU)


def test_accelerate_keeps_the_users_backend_and_passes_refusals(installed, answers, monkeypatch):
    from accelerate.utils import DistributedType

    answers.ddp_backend = "gloo"
    assert _prepare("hccl", monkeypatch) == ("hccl", DistributedType.MULTI_HPU)
    answers.refuse_ddp = {"nccl"}
    with pytest.raises(Refusal):
        _prepare("nccl", monkeypatch)
