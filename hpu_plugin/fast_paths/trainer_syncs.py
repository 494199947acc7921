"""Transformers' ``Trainer``: a step that does not wait for the device.

By default (``logging_nan_inf_filter=True``) the ``Trainer`` checks each step's loss for
NaN and infinity before adding it to its running total: ``torch.isnan(loss) or
torch.isinf(loss)`` reads one or two values into Python, so every step waits for the device
to finish the step (on Gaudi the launch queue runs dry each time). Where the check finds
one, the running total gets its own average since the last log instead
(``tr_loss += tr_loss / (1 + global_step - last_logged)``).

This fast path keeps that decision on the device: the ``training_step`` the loop calls
returns, in place of the loss, ``where(isfinite(loss), loss, tr_loss / k)``, the very
number the filter would have added, computed by the running total's own division; the
Trainer's check of it is then answered "finite" without reading it (the loss it is given
is a tensor subclass whose ``isnan`` and ``isinf`` say so on the host, and which is a plain
tensor to everything else). Either branch of the Trainer then adds that number, so the
running total and every logged loss are the Trainer's own. The one read left is where
Transformers reads the total anyway: the logging step, which reads the loss and the gradient
norm in one transfer instead of two. Where the model trains through graphs
(``training_graphs``) the filter is a graph too (one launch instead of three).

Taken for the ``training_step`` a ``Trainer``'s training loop calls (the user's own
override included, whose result is what the filter sees), when the loss is a 0-d floating
tensor on ``hpu`` and the filter is on; the user's ``logging_nan_inf_filter=False`` (no
check, no read) and every other loss are left alone. The running total is the Trainer's
``_tr_loss`` (Transformers 5) or, where the loop keeps it in a local (4.x), a copy kept in
step with it (the same additions, reset where the Trainer logs).
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Callable
from typing import Any

from hpu_plugin.fast_paths import training_graphs
from hpu_plugin.fast_paths.decisions import take
from hpu_plugin.gaudi.software import DEVICE_TYPE
from hpu_plugin.hosts.replacing import original_of
from hpu_plugin.patching import Patches, ours, record_out
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

NAME = "device_loss"
BACKEND = "hpu_backend"
HOST = "transformers"
ADAPTER = "device loss filter"


def _decided() -> type:
    """The loss the loop is handed: a plain tensor, except that the filter's ``isnan`` and
    ``isinf`` of it answer on the host (False: the number was decided on the device)."""
    import torch

    class DecidedLoss(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            if func in _HOST_ANSWERS:
                return torch.tensor(False)
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))

    return DecidedLoss


_HOST_ANSWERS: set[Any] = set()
_DECIDED: list[type] = []


def _subclass() -> type:
    if not _DECIDED:
        import torch

        _HOST_ANSWERS.update({torch.isnan, torch.isinf, torch.Tensor.isnan, torch.Tensor.isinf})
        _DECIDED.append(_decided())
    return _DECIDED[0]


def filtered(loss: Any, total: Any, since_log: Any) -> Any:
    """What the Trainer's filter adds to ``total`` for ``loss``: the loss where it is
    finite, else ``total / since_log``. On the device, no read."""
    import torch

    return torch.where(torch.isfinite(loss), loss, total / since_log)


_graph: list[Any] = []


def _filter(loss: Any, total: Any, since_log: int, graph: bool) -> Any:
    """:func:`filtered`; with ``graph`` (the model trains through graphs) as one
    ``hpu_backend`` graph (one launch where it is three ops), the count since the log given
    as a tensor so that one graph serves every step; the ops themselves where the graph
    cannot be made."""
    import torch

    if not graph:
        return filtered(loss, total, since_log)
    if not _graph:
        _graph.append(torch.compile(filtered, backend=BACKEND, dynamic=False))
    if _graph[0] is not None:
        try:
            # a float32 count: the division the Trainer makes by its int, to the bit
            count = torch.tensor(float(since_log), dtype=torch.float32).to(total.device)
            return _graph[0](loss, total, count)
        except Exception as exc:  # a fast path: the filter's ops one by one then
            _graph[0] = None
            say_once("device-loss-graph-failed", logging.WARNING,
                     "hpu_plugin: the loss filter runs op by op: %r", exc)
    return filtered(loss, total, since_log)


class _Loop:
    """One training loop of one Trainer: its running total where the loop keeps it in a
    local (4.x), and the ``training_step`` it had before."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.mirror: Any = None  # 4.x: the running total, kept in step with the loop's
        self.graph: bool | None = None  # does the model train through graphs?

    def total(self, like: Any) -> Any:
        import torch

        own = vars(self.trainer).get("_tr_loss")
        if isinstance(own, torch.Tensor):
            return own
        if self.mirror is None:  # the loop starts from zero, as the Trainer's does
            self.mirror = torch.zeros((), dtype=torch.float32, device=like.device)
        return self.mirror

    def wrap(self, step: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(step)
        def training_step(*args: Any, **kwargs: Any) -> Any:
            return self.decide(step(*args, **kwargs))

        return ours(training_step)

    def decide(self, loss: Any) -> Any:
        import torch

        trainer = self.trainer
        if not (isinstance(loss, torch.Tensor) and type(loss) is torch.Tensor
                and loss.device.type == DEVICE_TYPE and loss.ndim == 0
                and loss.is_floating_point() and trainer.args.logging_nan_inf_filter):
            return loss
        total = self.total(loss)
        since_log = 1 + trainer.state.global_step - trainer._globalstep_last_logged
        if self.graph is None:  # known once Accelerate prepared the model
            self.graph = training_graphs.graphed(trainer.model)
        value = _filter(loss, total, since_log, self.graph)
        if self.mirror is not None:
            self.mirror = self.mirror + value  # the loop's own addition, done here too
        return value.as_subclass(_subclass())

    def logged(self, total: Any) -> None:
        """The Trainer handed its running total to its logging (4.x: the local itself,
        which the logging resets in place): the copy is that tensor from now on."""
        if self.mirror is not None:
            self.mirror = total


_loops: dict[int, _Loop] = {}
#: ``TrainingArguments.parallel_mode`` values of a job whose logging gathers nothing.
_ONE_PROCESS = ("not_parallel", "not_distributed")


def _why_not(registry: Registry, trainer: Any) -> str | None:
    """Why this Trainer on ``hpu`` keeps its own filter; None when it is decided here."""
    if not trainer.args.logging_nan_inf_filter:
        return "logging_nan_inf_filter=False: the Trainer reads no loss to filter"
    if not take(registry, NAME, {"trainer": type(trainer).__name__}):
        return "turned off (HPU_PLUGIN_FAST_LOSS, HPU_PLUGIN_FAST or a plugin's hook)"
    return None


def install_trainer(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    cls = getattr(module, "Trainer", None)
    loop = original_of(cls, "_inner_training_loop", HOST, ADAPTER,
                       "Trainer._inner_training_loop", own=True)
    log_step = original_of(cls, "_maybe_log_save_evaluate", HOST, ADAPTER,
                           "Trainer._maybe_log_save_evaluate", own=True)
    if loop is None or log_step is None:
        return

    @functools.wraps(loop)
    def _inner_training_loop(self: Any, *args: Any, **kwargs: Any) -> Any:
        if getattr(getattr(self.args, "device", None), "type", None) != DEVICE_TYPE:
            return loop(self, *args, **kwargs)
        why = _why_not(registry, self)
        if why is not None:
            record_out(HOST, ADAPTER, f"not taken for {type(self).__name__}: {why}")
            return loop(self, *args, **kwargs)
        state = _loops[id(self)] = _Loop(self)
        before = vars(self).get("training_step")
        self.training_step = state.wrap(self.training_step)
        try:
            return loop(self, *args, **kwargs)
        finally:
            _loops.pop(id(self), None)
            if before is None:
                vars(self).pop("training_step", None)
            else:
                self.training_step = before

    @functools.wraps(log_step)
    def _maybe_log_save_evaluate(self: Any, tr_loss: Any, grad_norm: Any, *args: Any,
                                 **kwargs: Any) -> Any:
        state = _loops.get(id(self))
        if state is not None:
            state.logged(tr_loss)
            try:
                tr_loss, grad_norm, reset = _read_together(self, tr_loss, grad_norm)
            except Exception as exc:  # a fast path: the Trainer's own reads then
                say_once("device-loss-log-failed", logging.WARNING,
                         "hpu_plugin: the logged loss is read the Trainer's way: %r", exc)
                reset = None
            if reset is not None:
                out = log_step(self, tr_loss, grad_norm, *args, **kwargs)
                reset -= reset  # what the Trainer does to its running total when it logs
                return out
        return log_step(self, tr_loss, grad_norm, *args, **kwargs)

    patches.set(cls, "_inner_training_loop", ours(_inner_training_loop))
    patches.set(cls, "_maybe_log_save_evaluate", ours(_maybe_log_save_evaluate))
    patches.on_undo(_loops.clear, "device loss filter's loops")


def _read_together(trainer: Any, total: Any, grad_norm: Any) -> tuple[Any, Any, Any]:
    """At a step that logs, in one process: the running total and the gradient norm read
    in one transfer, handed to the Trainer's logging as host values (it reads each with
    ``.item()``), with the device total to reset after it. Elsewhere: as they were, None."""
    import torch

    control, state = trainer.control, trainer.state
    logs = control.should_log and state.global_step > trainer._globalstep_last_logged
    # one process, nothing to gather (a gather of a host value across ranks would fail)
    alone = getattr(trainer.args.parallel_mode, "value", None) in _ONE_PROCESS
    if not (logs and alone and isinstance(total, torch.Tensor)
            and total.device.type == DEVICE_TYPE and total.ndim == 0):
        return total, grad_norm, None
    norm = isinstance(grad_norm, torch.Tensor) and grad_norm.device.type == DEVICE_TYPE and (
        grad_norm.numel() == 1)
    if not norm:
        return total.to("cpu"), grad_norm, total
    values = torch.stack([total.float(), grad_norm.reshape(()).float()]).to("cpu")
    return (values[0].to(total.dtype), values[1].to(grad_norm.dtype).reshape(grad_norm.shape),
            total)


def install(registry: Registry, patches: Patches) -> None:
    """Register the post-import hook of ``Trainer`` (only with a device ready)."""
    from hpu_plugin import importhook

    importhook.when_imported(
        "transformers.trainer", lambda module: install_trainer(registry, patches, module))
