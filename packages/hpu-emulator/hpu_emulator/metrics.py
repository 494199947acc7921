"""``habana_frameworks.torch.hpu.metrics`` of the emulated Gaudi: the real API and its names.

Users and tools read the number of graph compilations as
``dict(metric_global("graph_compilation").stats())["TotalNumber"]``; the emulator must answer
the same question with the same names, keys and semantics as the bridge
(``python_packages/habana_frameworks/torch/hpu/metrics``): global metrics collect from the
start of the process, ``reset()`` zeroes them, ``metric_localcontext`` collects inside a
``with`` block only, an unknown global name gives ``None`` and an unknown local one raises
``MetricNotFound``. ``recipe_cache`` exists only when ``PT_HPU_ENABLE_CACHE_METRICS`` is on
when the module loads, as on hardware. What publishes the events is the recipe-cache model
of ``hpu_backend`` (``recipes.py``); graph compilation durations are microseconds.

``PT_HPU_METRICS_FILE`` (or ``HABANA_PT_METRICS_FILE``) has the global metrics written to a
file, as Gaudi's guides tell users to collect them: in ``PT_HPU_METRICS_FILE_FORMAT``
(``json``, the default, or ``text``), at the ``PT_HPU_METRICS_DUMP_TRIGGERS``
(``process_exit``, the default, ``mark_step``, ``metric_change``), once the process has
acquired its device; the file name gets ``-rank<RANK>`` in a job, and an existing file is
never overwritten (``.1``, ``.2``... are added), as the bridge's ``MetricSaver`` does.
"""

from __future__ import annotations

import atexit
import datetime
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from statistics import mean
from typing import Any

from hpu_emulator import config
from hpu_plugin import settings

#: Event topics, as the bridge's ``EventId`` names them.
GRAPH_COMPILATION = "GRAPH_COMPILATION"
CPU_FALLBACK = "CPU_FALLBACK"
CACHE_HIT = "CACHE_HIT"
CACHE_MISS = "CACHE_MISS"
MEMORY_DEFRAGMENTATION = "MEMORY_DEFRAGMENTATION"
MARK_STEP = "MARK_STEP"
DEVICE_ACQUIRED = "DEVICE_ACQUIRED"

Callback = Callable[[dict[str, str]], None]


class MetricNotFound(Exception):
    """A local metric of an unknown name was asked for (the bridge's exception)."""


class _Dispatcher:
    """Topic -> subscribers; the emulator's stand-in for the bridge's event dispatcher."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[str, dict[int, Callback]] = {}
        self._next = 0

    def subscribe(self, topic: str, callback: Callback) -> int:
        with self._lock:
            self._next += 1
            self._subscribers.setdefault(topic, {})[self._next] = callback
            return self._next

    def unsubscribe(self, handle: int) -> None:
        with self._lock:
            for callbacks in self._subscribers.values():
                callbacks.pop(handle, None)

    def publish(self, topic: str, params: dict[str, str]) -> None:
        with self._lock:
            callbacks = list(self._subscribers.get(topic, {}).values())
        for callback in callbacks:
            callback(params)


dispatcher = _Dispatcher()


class Metric:
    """One metric: subscribes to its topics while started, as the bridge's metrics do."""

    NAME = ""
    TOPICS: tuple[str, ...] = ()

    def __init__(self) -> None:
        self._handles: list[int] = []
        self.reset()
        self.start()

    def name(self) -> str:
        return self.NAME

    def start(self) -> None:
        if not self._handles:
            self._handles = [
                dispatcher.subscribe(topic, lambda params, t=topic: self._event(t, params))
                for topic in self.TOPICS
            ]

    def _event(self, topic: str, params: dict[str, str]) -> None:
        self._on_event(topic, params)
        if _globals.get(self.NAME) is self:
            _changed(self)

    def stop(self) -> None:
        for handle in self._handles:
            dispatcher.unsubscribe(handle)
        self._handles = []

    def reset(self) -> None:
        raise NotImplementedError

    def stats(self) -> Sequence[tuple[str, Any]]:
        raise NotImplementedError

    def _on_event(self, topic: str, params: dict[str, str]) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{self.NAME}: {self.stats()}"


class GraphCompilationMetric(Metric):
    NAME = "graph_compilation"
    TOPICS = (GRAPH_COMPILATION,)

    def __init__(self) -> None:
        self._recipes: list[tuple[str, int]] = []  # not cleared by reset(), as in the bridge
        super().__init__()

    def reset(self) -> None:
        self._number = 0
        self._time = 0

    def _on_event(self, topic: str, params: dict[str, str]) -> None:
        duration = int(params["duration"])
        self._number += 1
        self._time += duration
        self._recipes.append((params["recipe"], duration))

    def stats(self) -> list[tuple[str, Any]]:
        result: list[tuple[str, Any]] = [
            ("TotalNumber", self._number),
            ("TotalTime", self._time),
            ("AvgTime", float(self._time) / self._number if self._number else 0),
        ]
        if settings.gaudi_flag(os.environ.get("PT_HPU_METRICS_GC_DETAILS")):
            result.append(("recipe", list(self._recipes)))
        return result


class CpuFallbackMetric(Metric):
    NAME = "cpu_fallback"
    TOPICS = (CPU_FALLBACK,)

    def reset(self) -> None:
        self._number = 0
        self._ops: dict[str, int] = {}

    def _on_event(self, topic: str, params: dict[str, str]) -> None:
        self._number += 1
        op = params["op_name"]
        self._ops[op] = self._ops.get(op, 0) + 1

    def stats(self) -> list[tuple[str, Any]]:
        return [("TotalNumber", self._number), ("FallbackOps", dict(self._ops))]


class MemoryDefragmentationMetric(Metric):
    NAME = "memory_defragmentation"
    TOPICS = (MEMORY_DEFRAGMENTATION,)

    def reset(self) -> None:
        self._number = 0
        self._successful = 0
        self._times: list[int] = []

    def _on_event(self, topic: str, params: dict[str, str]) -> None:
        self._number += 1
        if settings.gaudi_flag(params.get("success")):
            self._successful += 1
            self._times.append(int(params["milliseconds"]))

    def stats(self) -> list[tuple[str, Any]]:
        return [
            ("TotalNumber", self._number),
            ("TotalSuccessful", self._successful),
            ("AvgTime", mean(self._times) if self._times else 0),
            ("MaxTime", max(self._times) if self._times else 0),
        ]


class RecipeCacheMetric(Metric):
    NAME = "recipe_cache"
    TOPICS = (CACHE_HIT, CACHE_MISS)

    def reset(self) -> None:
        self._hits = 0
        self._misses = 0
        self._recipe_hits: dict[str, int] = {}
        self._recipe_misses: dict[str, int] = {}

    def _on_event(self, topic: str, params: dict[str, str]) -> None:
        recipe = params["recipe_id"]
        if topic == CACHE_HIT:
            self._hits += 1
            self._recipe_hits[recipe] = self._recipe_hits.get(recipe, 0) + 1
        else:
            self._misses += 1
            self._recipe_misses[recipe] = self._recipe_misses.get(recipe, 0) + 1

    def stats(self) -> list[tuple[str, Any]]:
        return [
            ("TotalHit", self._hits),
            ("RecipeHit", dict(self._recipe_hits)),
            ("TotalMiss", self._misses),
            ("RecipeMiss", dict(self._recipe_misses)),
        ]


_types: dict[str, type[Metric]] = {}
_globals: dict[str, Metric] = {}


def _register(metric_type: type[Metric]) -> None:
    _types[metric_type.NAME] = metric_type
    _globals[metric_type.NAME] = metric_type()


_register(GraphCompilationMetric)
_register(CpuFallbackMetric)
_register(MemoryDefragmentationMetric)
if settings.gaudi_flag(os.environ.get("PT_HPU_ENABLE_CACHE_METRICS")):
    _register(RecipeCacheMetric)


def metric_global(name: str) -> Metric | None:
    """The process-wide metric of this name, or ``None`` (as the bridge answers)."""
    return _globals.get(name)


@contextmanager
def metric_localcontext(name: str) -> Iterator[Metric]:
    """A fresh metric that collects only inside the ``with`` block."""
    if name not in _types:
        raise MetricNotFound(f"Metric with given name ({name}) doesn't exist.")
    metric = _types[name]()
    try:
        yield metric
    finally:
        metric.stop()


class _Writer:
    """One metrics file, opened when the first record comes: a new file, never an existing
    one. JSON is one array of records, text one block a record, as the bridge writes them."""

    def __init__(self, name: str, form: str) -> None:
        self.name, self.form, self._out = name, form, None
        self._records = 0
        self._lock = threading.Lock()

    def _open(self) -> Any:
        directory = os.path.dirname(self.name)
        if directory:
            os.makedirs(directory, exist_ok=True)
        candidate, index = self.name, 0
        while True:
            try:
                out = open(candidate, "x")  # closed by close()
                break
            except FileExistsError:
                index += 1
                candidate = f"{self.name}.{index}"
        self.name = candidate
        if self.form == "json":
            out.write("[")
        return out

    def write(self, metric: Metric, trigger: str) -> None:
        now = datetime.datetime.now().isoformat()
        stats = list(metric.stats())
        with self._lock:
            if self._out is None:
                self._out = self._open()
            if self.form == "json":
                record = {"metric_name": metric.name(), "triggered_by": trigger,
                          "generated_on": now, "statistics": dict(stats)}
                self._out.write((",\n" if self._records else "") + json.dumps(record, default=str))
            else:
                self._out.writelines([f"Metric name: {metric.name()}\n",
                                      f"Triggered by: {trigger}\n", f"Generated on: {now}\n",
                                      "Statistics:\n",
                                      *[f"\t{key}: {value}\n" for key, value in stats], "\n"])
            self._records += 1
            self._out.flush()

    def close(self) -> None:
        with self._lock:
            if self._out is not None:
                if self.form == "json":
                    self._out.write("]\n")
                self._out.close()
                self._out = None


def _rank_name(name: str) -> str:
    """``metrics.json`` -> ``metrics-rank3.json`` in a job (``RANK``, or Open MPI's)."""
    rank = os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK"))
    if rank is None:
        return name
    directory, file = os.path.split(name)
    stem, dot, ext = file.rpartition(".")
    return os.path.join(directory, f"{stem}-rank{rank}.{ext}" if dot and stem
                        else f"{file}-rank{rank}")


class _Saver:
    """``PT_HPU_METRICS_FILE``: the global metrics written at each trigger."""

    def __init__(self) -> None:
        name = config.metrics_variable(os.environ, "PT_HPU_METRICS_FILE")
        self.triggers: tuple[str, ...] = ()
        self.writer: _Writer | None = None
        self.acquired = False
        if not name:
            return
        from hpu_emulator import runtime

        self.acquired = runtime.device_acquired()
        config.check_metrics_variables(os.environ)
        self.triggers = tuple((config.metrics_variable(
            os.environ, "PT_HPU_METRICS_DUMP_TRIGGERS") or "process_exit").split(","))
        self.writer = _Writer(_rank_name(name), config.metrics_variable(
            os.environ, "PT_HPU_METRICS_FILE_FORMAT") or "json")
        dispatcher.subscribe(DEVICE_ACQUIRED, lambda params: setattr(self, "acquired", True))
        dispatcher.subscribe(MARK_STEP, lambda params: self.dump("mark_step"))
        atexit.register(self.at_exit)

    def dump(self, trigger: str, metrics: Sequence[Metric] | None = None) -> None:
        if self.writer is not None and self.acquired and trigger in self.triggers:
            for metric in _globals.values() if metrics is None else metrics:
                self.writer.write(metric, trigger)

    def at_exit(self) -> None:
        self.dump("process_exit")
        if self.writer is not None:
            self.writer.close()


def _changed(metric: Metric) -> None:
    _saver.dump("metric_change", [metric])


_saver = _Saver()


def metrics_dump(file_name: str, format: str = "json") -> None:
    """Write the global metrics to a new file (``"json"`` or ``"text"``), trigger "user";
    an existing file is kept and a numbered one written, as by the bridge."""
    form = str(getattr(format, "value", format))
    if form not in config.METRICS_FORMATS:
        raise ValueError(f"metrics_dump: format {format!r} is not one of "
                         f"{', '.join(config.METRICS_FORMATS)}")
    writer = _Writer(file_name, form)
    try:
        for metric in _globals.values():
            writer.write(metric, "user")
    finally:
        writer.close()
