"""The pre-flight exchange through a real torch store: a missing rank is named within the
timeout, and the facts of every rank come back in rank order."""

from __future__ import annotations

import time

import pytest
import torch.distributed as dist

from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.preflight import PreflightError
from hpu_plugin.hosts import preflight_store as preflight
from hpu_plugin.registry import Registry
from hpu_plugin.switches import Selection


def test_a_rank_that_never_reports_is_named_within_the_timeout():
    store = dist.HashStore()
    start = time.monotonic()
    with pytest.raises(PreflightError, match=r"rank\(s\) 1,2 of 3 did not report .* within 0.5 s"):
        preflight._gather(store, 0, 3, {"rank": "0"}, 0.5)
    assert time.monotonic() - start < 10


def test_every_rank_facts_come_back_in_rank_order():
    store = dist.HashStore()
    store.set(f"{preflight.PREFIX}1", '{"rank": "1", "PT_HPU_LAZY_MODE": "0"}')
    got = preflight._gather(store, 0, 2, {"rank": "0", "PT_HPU_LAZY_MODE": "0"}, 5)
    assert [r["rank"] for r in got] == ["0", "1"]


def test_a_bad_timeout_stops_the_job_before_any_rank_waits(monkeypatch):
    """``HPU_PLUGIN_PREFLIGHT_TIMEOUT`` is read before this rank publishes or waits: a bad
    value is the settings error at once, not a wait of unknown length."""
    monkeypatch.setenv("HPU_PLUGIN_PREFLIGHT_TIMEOUT", "1e3")
    store = dist.HashStore()
    start = time.monotonic()
    with pytest.raises(GaudiConfigError, match=r"HPU_PLUGIN_PREFLIGHT_TIMEOUT='1e3'.*Fix: set"):
        preflight.check_ranks(Registry(Selection()), store, 0, 2)
    assert time.monotonic() - start < 10
    assert store.num_keys() == 0  # nothing was published: the job never started waiting


def test_a_good_timeout_is_the_wait_for_a_missing_rank(monkeypatch):
    monkeypatch.setenv("HPU_PLUGIN_PREFLIGHT_TIMEOUT", "0.5")
    with pytest.raises(PreflightError, match=r"rank\(s\) 1 of 2 did not report .* within 0.5 s"):
        preflight.check_ranks(Registry(Selection()), dist.HashStore(), 0, 2)
