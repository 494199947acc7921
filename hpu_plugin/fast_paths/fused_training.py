"""Accelerate (and so the ``Trainer``): AdamW and SGD stepped by Gaudi's fused optimizer
kernels, gradient clipping by its fused clip-norm kernel.

In eager mode every op is a launch on Gaudi: ``torch.optim.AdamW`` makes several per
parameter, the fused kernel (``torch.ops.hpu.optimizer_adamw``, what hpex ``FusedAdamW``
calls) one per parameter group. Every optimizer a ``Trainer`` or a user's ``accelerator.
prepare`` steps is an ``AcceleratedOptimizer``; when it wraps exactly ``torch.optim.AdamW``
or ``SGD`` (also with ``fused=True``, torch's fused kernel, which Gaudi lacks) with options the
kernels have, on ``hpu`` parameters, its ``step`` runs the
kernel on the optimizer's own state (torch's layout: ``step``, ``exp_avg``, ``exp_avg_sq``,
``momentum_buffer``), so schedulers, ``state_dict`` and checkpoints stay torch's. Under
FSDP 2 and tensor parallelism each card steps its local shards of the parameters. Any other
class (a subclass, Adafactor, bitsandbytes 8-bit, ...) or option keeps torch's step. Under a
gradient scaler (fp16) Accelerate restores the step it saw at its ``__init__`` after every
scaled step, so it is handed the fused one (``keep_under_scaler``).

The arithmetic is torch's: the kernel computes ``w*(1-lr*wd) - lr*sqrt(bc2)/bc1 *
m/(sqrt(v)+eps')``, and ``eps' = eps*sqrt(bc2)`` makes that torch's ``w*(1-lr*wd) -
lr/bc1 * m/(sqrt(v)/sqrt(bc2)+eps)``. ``Accelerator.clip_grad_norm_`` with the 2-norm, outside
FSDP, DeepSpeed and XLA, unscales as before and clips with ``torch.ops.hpu.fused_clip_norm``.
"""

from __future__ import annotations

import functools
import logging
import math
import sys
import types
from collections.abc import Callable
from typing import Any

from hpu_plugin.fast_paths.decisions import take
from hpu_plugin.gaudi.software import DEVICE_TYPE
from hpu_plugin.hosts.replacing import original_of, stay_out
from hpu_plugin.patching import Patches, is_ours, ours
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

HOST = "accelerate"
ADAPTER = "fused optimizer and clip-norm"


def _op(name: str) -> Any | None:
    import torch

    try:
        return getattr(torch.ops.hpu, name)
    except (AttributeError, RuntimeError):
        return None


def _on_hpu(params: list[Any]) -> bool:
    """Plain dense floating-point tensors on hpu: what the fused clip-norm kernel takes. A
    tensor subclass (the DTensor of tensor parallelism and FSDP 2) holds a shard, and the
    norm of a shard is not the norm of the whole."""
    import torch

    return bool(params) and all(
        p.device.type == DEVICE_TYPE and not p.is_sparse and p.is_floating_point()
        and type(p.data) is torch.Tensor for p in params)


def _dtensor() -> type | None:
    """torch's DTensor class if a program has loaded it (a DTensor parameter means it has)."""
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None)


def _steppable(params: list[Any]) -> bool:
    """Dense floating-point parameters on hpu, plain or DTensor (FSDP 2, tensor
    parallelism), none of whose gradients waits for a reduction. The optimizer's arithmetic
    is elementwise, so each card steps its local shards with the kernel, as torch's fused
    AdamW does through DTensor, whose ``aten::_fused_adamw_`` the Gaudi bridge lacks (it
    would run on the CPU)."""
    import torch

    dtensor = _dtensor()
    if not params:
        return False
    for p in params:
        if p.device.type != DEVICE_TYPE or p.is_sparse or not p.is_floating_point():
            return False
        if type(p.data) is torch.Tensor:
            continue
        if (type(p.data) is not dtensor
                or any(placement.is_partial() for placement in p.placements)):
            return False
        if p.grad is not None and (type(p.grad) is not dtensor or any(
                placement.is_partial() for placement in p.grad.placements)):
            return False
    return True


def _local(tensor: Any) -> Any:
    """The tensor the kernel updates in place: a DTensor's local shard (under ``no_grad``
    ``to_local`` is that shard itself), a plain tensor as it is."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _local_grad(p: Any) -> Any:
    """``p``'s gradient as the shard of it this card steps. Tensor parallelism can leave a
    gradient laid out otherwise than its parameter (whole on every card for a parameter split
    between them): it is laid out as the parameter first, as DTensor does for torch's step."""
    grad = p.grad
    if hasattr(grad, "to_local") and grad.placements != p.placements:
        grad = grad.redistribute(p.device_mesh, p.placements)
    return _local(grad)


def _kind(optimizer: Any) -> str | None:
    """The fused kernel for ``optimizer``'s class (``"adamw"``, ``"sgd"``): exactly those
    classes, not subclasses, whose steps may differ."""
    import torch

    return {torch.optim.AdamW: "adamw", torch.optim.SGD: "sgd"}.get(type(optimizer))


def _fits(optimizer: Any) -> str | None:
    """Which fused kernel steps ``optimizer`` (``"adamw"``, ``"sgd"``), or None."""
    import torch

    kind = _kind(optimizer)
    if kind is None:
        return None
    for group in optimizer.param_groups:
        params = list(group["params"])
        if (params and not _steppable(params)) or isinstance(
                group.get("lr"), torch.Tensor):
            return None
        # ``fused=True`` (Transformers 5's default ``adamw_torch_fused``) is torch's own fused
        # kernel, which the Gaudi bridge does not have (aten::_fused_adamw_ falls back to
        # the CPU): the same arithmetic, so the Gaudi kernel takes it over.
        if group.get("maximize") or group.get("differentiable"):
            return None
        # ``fused=False`` or an explicit ``foreach`` is the user's choice of one of torch's
        # own steps (no host sets either for the user)
        if group.get("fused") is False or group.get("foreach") is not None:
            return None
        if kind == "adamw" and (group.get("amsgrad") or group.get("capturable")
                                or not group.get("decoupled_weight_decay", True)):
            return None
        if kind == "sgd" and group.get("momentum", 0) and group.get("dampening", 0):
            return None  # torch's first step copies the gradient; with dampening they differ
    return kind if _op("optimizer_adamw" if kind == "adamw" else "optimizer_sgd") else None


def _scalar(value: float, like: Any) -> Any:
    import torch

    return torch.tensor([value], dtype=torch.float).to(like.dtype).to(like.device)


def adamw_step(optimizer: Any) -> None:
    """One AdamW step of every group: one kernel launch per group and step count."""
    import torch

    for group in optimizer.param_groups:
        beta1, beta2 = group["betas"]
        by_step: dict[float, list[Any]] = {}
        for p in group["params"]:
            if p.grad is None:
                continue
            state = optimizer.state[p]
            if not state:
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["step"] += 1
            by_step.setdefault(float(state["step"]), []).append(p)
        for step, params in by_step.items():
            # a card's shard of a small parameter can be empty: nothing of it to update here
            params = [p for p in params if _local(p.data).numel()]
            if not params:
                continue
            bc1, bc2 = 1 - beta1**step, 1 - beta2**step
            lr, wd = group["lr"], group["weight_decay"]
            states = [optimizer.state[p] for p in params]
            like = _local(params[0].data)
            # the bridge's two schemas: lazy mode takes the decay factor as a float
            decay = (1.0 - lr * wd,) if _lazy() else (_scalar(1.0 - lr * wd, like), wd != 0)
            torch.ops.hpu.optimizer_adamw(
                [_local_grad(p) for p in params], [_local(p.data) for p in params],
                [_local(s["exp_avg"]) for s in states], [_local(s["exp_avg_sq"]) for s in states],
                _scalar(-lr * math.sqrt(bc2) / bc1, like), beta1, beta2,
                group["eps"] * math.sqrt(bc2), *decay, None, None,
            )


def _lazy() -> bool:
    """The mode the bridge's ops were loaded for (its ``utils.internal.is_lazy``)."""
    try:
        from habana_frameworks.torch.utils.internal import is_lazy
    except Exception:
        return False
    return bool(is_lazy())


def sgd_step(optimizer: Any) -> None:
    """One SGD step of every group: one kernel launch per group."""
    import torch

    for group in optimizer.param_groups:
        params = [p for p in group["params"] if p.grad is not None]
        momentum = group.get("momentum", 0)
        for p in params if momentum else ():
            state = optimizer.state[p]
            if state.get("momentum_buffer") is None:
                state["momentum_buffer"] = torch.zeros_like(p)
        # a card's shard of a small parameter can be empty: nothing of it to update here
        params = [p for p in params if _local(p.data).numel()]
        if not params:
            continue
        like = _local(params[0].data)
        lr = _scalar(group["lr"], like).float()
        grads, weights = [_local_grad(p) for p in params], [_local(p.data) for p in params]
        if not momentum:
            torch.ops.hpu.optimizer_sgd(grads, weights, lr, group["weight_decay"], 0.0,
                                        group.get("dampening", 0), group.get("nesterov", False))
            continue
        buffers = [_local(optimizer.state[p]["momentum_buffer"]) for p in params]
        step_t = vars(optimizer).get("_hpu_plugin_sgd_step")  # the kernel's epoch counter
        if step_t is None:
            step_t = torch.tensor([0], dtype=torch.int32).to(like.device)
            optimizer._hpu_plugin_sgd_step = step_t
        torch.ops.hpu.optimizer_sgd_momentum(
            grads, weights, buffers, step_t, lr, _scalar(momentum, like).float(),
            group["weight_decay"], group.get("dampening", 0), group.get("nesterov", False))


STEPS: dict[str, Callable[[Any], None]] = {"adamw": adamw_step, "sgd": sgd_step}


def amp_scaled(optimizer: Any) -> bool:
    """A gradient scaler's part of the step, as torch's fused AdamW does it: whether to step.

    For an optimizer that scales itself (torch's ``fused=True`` has
    ``_step_supports_amp_scaling``), ``GradScaler.step`` leaves ``found_inf`` (and, where the
    gradients were not unscaled yet, ``grad_scale``) on it instead of unscaling: the step is
    skipped when a gradient was not finite, else the gradients are divided by the scale
    first. The scaler reads ``found_inf`` on the host for other optimizers too.
    """
    import torch

    found_inf = vars(optimizer).get("found_inf")
    # A host read per scaled step (torch's own fused kernel takes found_inf as a tensor and
    # skips on the device; Gaudi's optimizer_adamw / optimizer_sgd have no such input, and a
    # skip on the device would need a select per state tensor, launches the fused kernel is
    # there to save). The scaler makes the same read for every unfused optimizer.
    if found_inf is not None and float(found_inf) != 0.0:
        return False
    grad_scale = vars(optimizer).get("grad_scale")
    if grad_scale is not None:
        grads = [p.grad for group in optimizer.param_groups for p in group["params"]
                 if p.grad is not None]
        if grads:
            torch._foreach_div_(grads, grad_scale.to(grads[0].device))
    return True


def fuse(registry: Registry, patches: Patches, optimizer: Any) -> bool:
    """Make ``optimizer.step`` the fused kernel where it fits and the hook agrees (through
    ``patches``: undoing the plugin gives the optimizer its own step again)."""
    if is_ours(vars(optimizer).get("step")):
        return True
    kind = _fits(optimizer)
    if kind is None or not take(
            registry, "fused_optimizer", {"optimizer": type(optimizer).__name__}):
        return False
    original = optimizer.step
    fused = STEPS[kind]

    def run(self: Any, closure: Callable[[], Any] | None = None) -> Any:
        import torch

        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            if amp_scaled(self):
                fused(self)
        return loss

    # torch's own wrapper of every optimizer step: step hooks, profiler range, step counter
    hooked = getattr(type(optimizer), "profile_hook_step", lambda f: f)(run)

    def step(self: Any, closure: Callable[[], Any] | None = None) -> Any:
        if _fits(self) != kind:  # groups added or options changed since: torch's step
            return original(closure)
        self._opt_called = True  # what an LR scheduler's wrapper of step records
        return hooked(self, closure)

    step.plain = original  # type: ignore[attr-defined]  # what keep_under_scaler gives back
    if getattr(original, "_wrapped_by_lr_sched", False):  # step records its call, as before
        step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
    # a bound method, as the step it replaces: LR schedulers wrap ``step.__func__``
    patches.set_on_instance(optimizer, "step", types.MethodType(ours(step), optimizer))
    return True


def clip_grads(parameters: list[Any]) -> list[Any] | None:
    """The gradients the fused clip-norm kernel takes, or None where it does not fit."""
    grads = [p.grad for p in parameters if getattr(p, "grad", None) is not None]
    if _op("fused_clip_norm") is None or not _on_hpu(grads) or len({g.dtype for g in grads}) != 1:
        return None
    return grads


def fused_clip(grads: list[Any], max_norm: float) -> Any:
    """The total 2-norm of ``grads``, which are scaled down to ``max_norm`` if above it."""
    import torch

    dtype, device = grads[0].dtype, grads[0].device
    with torch.no_grad():
        placeholder = torch.zeros(1, dtype=dtype).to(device)
        max_norm_t = (torch.ones(1) * max_norm).to(dtype).to(device)
        return torch.ops.hpu.fused_clip_norm([*grads, placeholder], max_norm_t, 2.0)


# -- installing -----------------------------------------------------------------------------


def install_optimizer(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    cls = getattr(module, "AcceleratedOptimizer", None)
    original = original_of(cls, "__init__", HOST, ADAPTER, "AcceleratedOptimizer.__init__",
                           own=True)
    if original is None:
        return

    patch_step = getattr(module, "patch_optimizer_step", None)

    @functools.wraps(original)
    def __init__(self: Any, optimizer: Any, *args: Any, **kwargs: Any) -> None:
        original(self, optimizer, *args, **kwargs)
        if _placed_later(self.optimizer):
            fuse_at_first_step(registry, patches, self, patch_step)
        else:
            fuse_accelerated(registry, patches, self, patch_step)

    patches.set(cls, "__init__", ours(__init__))


def fuse_accelerated(registry: Registry, patches: Patches, accelerated: Any,
                     patch_step: Callable[..., Any] | None) -> None:
    """Fuse the step of the optimizer an ``AcceleratedOptimizer`` wraps, where it fits."""
    try:
        if fuse(registry, patches, accelerated.optimizer) and getattr(
                accelerated, "scaler", None) is not None:
            keep_under_scaler(patches, accelerated, patch_step)
    except Exception as exc:  # a fast path: never break the user's optimizer
        say_once("fused-optimizer-failed", logging.WARNING,
                 "hpu_plugin: the fused optimizer is off: %r", exc)


def _placed_later(optimizer: Any) -> bool:
    """An AdamW or SGD whose parameters are not on hpu yet. Under FSDP 2 Accelerate wraps
    the optimizer before it shards the model onto the card (``Accelerator._prepare_fsdp2``)
    and gives the optimizer the sharded parameters afterwards."""
    return _kind(optimizer) is not None and any(
        p.device.type != DEVICE_TYPE for group in optimizer.param_groups
        for p in group["params"])


def fuse_at_first_step(registry: Registry, patches: Patches, accelerated: Any,
                       patch_step: Callable[..., Any] | None) -> None:
    """Decide the fused step at the first step, where the parameters are those it trains;
    from then on Accelerate's own ``step`` runs. An LR scheduler built on the wrapper may
    have wrapped this step in its own: then it stays, and only runs Accelerate's."""
    decided: list[bool] = []

    def step(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not decided:
            decided.append(True)
            if getattr(vars(self).get("step"), "__func__", None) is step:
                del self.step
            fuse_accelerated(registry, patches, self, patch_step)
        return type(self).step(self, *args, **kwargs)

    patches.set_on_instance(accelerated, "step", types.MethodType(ours(step), accelerated))


def keep_under_scaler(patches: Patches, accelerated: Any,
                      patch_step: Callable[..., Any] | None) -> None:
    """With a gradient scaler (fp16), Accelerate keeps the step it found at its ``__init__``
    (before the fused one was set) and puts it back after every scaled step: it is told
    the fused one instead. Where its names moved, torch's step is left to it."""
    if patch_step is None or not hasattr(accelerated, "_optimizer_original_step_method"):
        stay_out(HOST, ADAPTER, "AcceleratedOptimizer._optimizer_original_step_method")
        return

    def steps(accelerated: Any, step: Any) -> None:
        accelerated._optimizer_original_step_method = step
        accelerated._optimizer_patched_step_method = patch_step(accelerated, step)

    def give_back(accelerated: Any) -> None:  # what Accelerate's __init__ kept: torch's step
        plain = getattr(accelerated._optimizer_original_step_method, "plain", None)
        if plain is not None:
            steps(accelerated, plain)

    # both names in one: the old methods refer to ``accelerated`` (Patches must hold it weakly)
    patches.set_on_instance(accelerated, "_optimizer_original_step_method",
                            accelerated.optimizer.step, restore=give_back)
    steps(accelerated, accelerated.optimizer.step)


def install_clip(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    cls = getattr(module, "Accelerator", None)
    original = original_of(cls, "clip_grad_norm_", HOST, ADAPTER, "Accelerator.clip_grad_norm_",
                           own=True)
    if original is None:
        return
    plain = ("NO", "MULTI_HPU")

    @functools.wraps(original)
    def clip_grad_norm_(self: Any, parameters: Any, max_norm: float, norm_type: float = 2) -> Any:
        kind = str(getattr(self.distributed_type, "value", self.distributed_type))
        if kind in plain and float(norm_type) == 2.0 and take(
                registry, "fused_clip_norm", {"distributed_type": kind}):
            parameters = list(parameters)
            grads = clip_grads(parameters)
            if grads is not None:
                self.unscale_gradients()
                return fused_clip(grads, float(max_norm))
        return original(self, parameters, max_norm, norm_type)

    patches.set(cls, "clip_grad_norm_", ours(clip_grad_norm_))


def install(registry: Registry, patches: Patches) -> None:
    """Register the post-import hooks (only with a device ready)."""
    from hpu_plugin import importhook

    def hook(adapter: Callable[..., None]) -> Callable[[types.ModuleType], None]:
        return lambda module: adapter(registry, patches, module)

    importhook.when_imported("accelerate.optimizer", hook(install_optimizer))
    importhook.when_imported("accelerate.accelerator", hook(install_clip))
