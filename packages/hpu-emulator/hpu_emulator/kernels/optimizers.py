"""The bridge's fused optimizer steps: ``hpu::optimizer_adamw``, ``optimizer_sgd``,
``optimizer_sgd_momentum``. They update their tensors in place and return nothing.

``optimizer_adamw`` has two schemas on the bridge, one per execution mode, and a process
loads one of them: eager (``eager_custom_op_register.cpp``) takes ``Tensor weight_decay,
bool has_weight_decay``; lazy (``habana_kernels/kernels_register.cpp``) takes
``float weight_decay``. ``hpex.optimizers.FusedAdamW`` and DeepSpeed's HPU FusedAdam pick
the call by ``is_lazy()``. Both pass ``neg_step = -lr * sqrt(1 - beta2^t) / (1 - beta1^t)``
and ``weight_decay = 1 - lr * wd`` (a factor, not the rate). The update, per tensor::

    w *= weight_decay                      (when has_weight_decay / always in lazy mode)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    w += neg_step * m / (sqrt(v) + eps)

which is ``torch.optim.AdamW`` with the bias correction folded into the step (so ``eps`` is
not divided by ``sqrt(1 - beta2^t)``). Moments kept in float8 (``moments_dtype`` of
``FusedAdamW``) are read and written through their per-tensor scales: stored = value /
scale, with the scale refreshed so that the largest magnitude fits the format.

``optimizer_sgd`` and ``optimizer_sgd_momentum`` follow ``torch.optim.SGD`` (weight decay
added to the gradient, momentum buffer ``buf = mom * buf + (1 - dampening) * d``, Nesterov
``d + mom * buf``), with the learning rate and momentum as device tensors, as
``hpex.optimizers.FusedSGD`` passes them. The momentum buffers start at zero (``FusedSGD``
allocates them so), so with dampening the first step differs from torch's, which starts the
buffer at the first gradient.

Of LAMB (``hpex.optimizers.FusedLamb``), the two ops with a reference in the bridge's own
tests: ``optimizer_lamb_fused_norm(grad[], max_norm)`` returns the global gradient norm's
clipping divisor, ``norm / max_norm`` when the norm exceeds ``max_norm``, else 1, as a
one-element tensor (``test_optimizer_lamb_fused_norm.py``); ``optimizer_lamb_phase2``
adds ``adam_step * neg_step * trust_ratio`` to each weight, where the trust ratio is
``weight_norm / adam_norm`` when weight decay or ``use_lamb`` is on and both norms are
positive, else 1 (``test_hpu_custom_lamb_optimizer.py``). Phase 1 (the moments and the
norms), which no test of the bridge pins down, is not emulated: ``FusedLamb`` is absent.

``optimizer_ema(model_inputs, updated_ema, decay)`` (``hpex.movingavrg.FusedEMA``) moves each
floating tensor of the moving average towards the model's: ``ema = ema * d + (1 - d) *
model``, ``d`` the one-element ``decay``, as the reference in ``test_ema.py`` computes it.
"""

from __future__ import annotations

import torch

from hpu_emulator.kernels.checks import expect, expect_same_lengths

FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)

ADAMW_EAGER = (
    "optimizer_adamw(Tensor[] gradient_vec, Tensor(a!)[] weight_vec, Tensor(b!)[] exp_avg_vec, "
    "Tensor(c!)[] exp_avg_sq_vec, Tensor neg_step_t, float beta1, float beta2, float epsilon, "
    "Tensor weight_decay, bool has_weight_decay, Tensor(d!)[]? exp_avg_scales = None, "
    "Tensor(e!)[]? exp_avg_sq_scales = None) -> ()"
)
ADAMW_LAZY = (
    "optimizer_adamw(Tensor[] gradient_vec, Tensor(a!)[] weight_vec, Tensor(b!)[] exp_avg_vec, "
    "Tensor(c!)[] exp_avg_sq_vec, Tensor neg_step_t, float beta1, float beta2, float epsilon, "
    "float weight_decay, Tensor(d!)[]? exp_avg_scales = None, "
    "Tensor(e!)[]? exp_avg_sq_scales = None) -> ()"
)
SGD = (
    "optimizer_sgd(Tensor[] gradients, Tensor(a!)[] weights_in, Tensor(b!) learning_rate, "
    "float wd, float mom, float damp, bool nesterov) -> ()"
)
EMA = "optimizer_ema(Tensor[] model_inputs, Tensor(a!)[] updated_ema, Tensor decay) -> ()"
LAMB_FUSED_NORM = "optimizer_lamb_fused_norm(Tensor[] grad, float max_norm) -> Tensor"
LAMB_PHASE2 = (
    "optimizer_lamb_phase2(Tensor(a!)[] weights, Tensor[] adam_norms, Tensor[] weight_norms, "
    "Tensor[] adam_steps, Tensor neg_step, float wd, bool use_lamb) -> ()"
)
SGD_MOMENTUM = (
    "optimizer_sgd_momentum(Tensor[] gradients, Tensor(a!)[] weights_in, Tensor(b!)[] "
    "momentum_in, Tensor epoch_num, Tensor(c!) learning_rate, Tensor(d!) mom, float wd, "
    "float damp, bool nesterov) -> ()"
)


def _read(moment: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    value = moment.float()
    return value * scale.float() if scale is not None else value


def _write(moment: torch.Tensor, value: torch.Tensor, scale: torch.Tensor | None) -> None:
    if scale is None:
        moment.copy_(value.to(moment.dtype))
        return
    if moment.dtype not in FP8:  # the other moment of a mixed (e.g. bf16, fp8) pair
        moment.copy_((value / scale.float()).to(moment.dtype))
        return
    largest = torch.finfo(moment.dtype).max
    new_scale = torch.clamp(value.abs().amax() / largest, min=torch.finfo(torch.float32).tiny)
    moment.copy_((value / new_scale).to(moment.dtype))
    scale.copy_(new_scale.reshape(scale.shape).to(scale.dtype))


def _adamw(gradient_vec: list[torch.Tensor], weight_vec: list[torch.Tensor],
           exp_avg_vec: list[torch.Tensor], exp_avg_sq_vec: list[torch.Tensor],
           neg_step_t: torch.Tensor, beta1: float, beta2: float, epsilon: float,
           decay: torch.Tensor | float | None, exp_avg_scales: list[torch.Tensor] | None,
           exp_avg_sq_scales: list[torch.Tensor] | None) -> None:
    expect(len(weight_vec) > 0, "optimizer_adamw : can not process empty weight vector")
    expect((exp_avg_scales is None) == (exp_avg_sq_scales is None),
           "optimizer_adamw : expects both or neighter scales to be set")
    expect_same_lengths("optimizer_adamw", gradient_vec=gradient_vec, weight_vec=weight_vec,
                        exp_avg_vec=exp_avg_vec, exp_avg_sq_vec=exp_avg_sq_vec)
    step = neg_step_t.float().reshape(-1)[0]
    factor = decay.float().reshape(-1)[0] if isinstance(decay, torch.Tensor) else decay
    with torch.no_grad():
        for i, (g, w, m, v) in enumerate(zip(gradient_vec, weight_vec, exp_avg_vec,
                                             exp_avg_sq_vec, strict=False)):
            m_scale = exp_avg_scales[i] if exp_avg_scales is not None else None
            v_scale = exp_avg_sq_scales[i] if exp_avg_sq_scales is not None else None
            grad = g.float()
            new_m = _read(m, m_scale) * beta1 + grad * (1.0 - beta1)
            new_v = _read(v, v_scale) * beta2 + grad * grad * (1.0 - beta2)
            weight = w.float()
            if factor is not None:
                weight = weight * factor
            weight = weight + step * new_m / (new_v.sqrt() + epsilon)
            w.copy_(weight.to(w.dtype))
            _write(m, new_m, m_scale)
            _write(v, new_v, v_scale)


def optimizer_adamw_eager(gradient_vec: list[torch.Tensor], weight_vec: list[torch.Tensor],
                          exp_avg_vec: list[torch.Tensor], exp_avg_sq_vec: list[torch.Tensor],
                          neg_step_t: torch.Tensor, beta1: float, beta2: float, epsilon: float,
                          weight_decay: torch.Tensor, has_weight_decay: bool,
                          exp_avg_scales: list[torch.Tensor] | None = None,
                          exp_avg_sq_scales: list[torch.Tensor] | None = None) -> None:
    _adamw(gradient_vec, weight_vec, exp_avg_vec, exp_avg_sq_vec, neg_step_t, beta1, beta2,
           epsilon, weight_decay if has_weight_decay else None, exp_avg_scales,
           exp_avg_sq_scales)


def optimizer_adamw_lazy(gradient_vec: list[torch.Tensor], weight_vec: list[torch.Tensor],
                         exp_avg_vec: list[torch.Tensor], exp_avg_sq_vec: list[torch.Tensor],
                         neg_step_t: torch.Tensor, beta1: float, beta2: float, epsilon: float,
                         weight_decay: float, exp_avg_scales: list[torch.Tensor] | None = None,
                         exp_avg_sq_scales: list[torch.Tensor] | None = None) -> None:
    _adamw(gradient_vec, weight_vec, exp_avg_vec, exp_avg_sq_vec, neg_step_t, beta1, beta2,
           epsilon, weight_decay if weight_decay != 1.0 else None, exp_avg_scales,
           exp_avg_sq_scales)


def optimizer_sgd(gradients: list[torch.Tensor], weights_in: list[torch.Tensor],
                  learning_rate: torch.Tensor, wd: float, mom: float, damp: float,
                  nesterov: bool) -> None:
    expect(len(weights_in) > 0, "optimizer_sgd : can not process empty weight vector")
    expect_same_lengths("optimizer_sgd", gradients=gradients, weights_in=weights_in)
    lr = learning_rate.float().reshape(-1)[0]
    with torch.no_grad():
        for g, w in zip(gradients, weights_in, strict=False):
            d = g.float() + wd * w.float() if wd != 0 else g.float()
            w.copy_((w.float() - lr * d).to(w.dtype))


def optimizer_sgd_momentum(gradients: list[torch.Tensor], weights_in: list[torch.Tensor],
                           momentum_in: list[torch.Tensor], epoch_num: torch.Tensor,
                           learning_rate: torch.Tensor, mom: torch.Tensor, wd: float,
                           damp: float, nesterov: bool) -> None:
    expect(len(weights_in) > 0, "optimizer_sgd_momentum : can not process empty weight vector")
    expect_same_lengths("optimizer_sgd_momentum", gradients=gradients, weights_in=weights_in,
                        momentum_in=momentum_in)
    lr = learning_rate.float().reshape(-1)[0]
    momentum = mom.float().reshape(-1)[0]
    with torch.no_grad():
        for g, w, buf in zip(gradients, weights_in, momentum_in, strict=False):
            d = g.float() + wd * w.float() if wd != 0 else g.float()
            new_buf = momentum * buf.float() + (1.0 - damp) * d
            buf.copy_(new_buf.to(buf.dtype))
            d = d + momentum * new_buf if nesterov else new_buf
            w.copy_((w.float() - lr * d).to(w.dtype))


def optimizer_lamb_fused_norm(grad: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    expect(len(grad) > 0, "optimizer_lamb_fused_norm: can not process an empty grad vector")
    dtype = grad[0].dtype
    total = torch.zeros(1, dtype=torch.float32, device=grad[0].device)
    for g in grad:
        total += g.float().pow(2).sum()
    norm = total.sqrt()
    return torch.where(norm > max_norm, norm / max_norm, torch.ones_like(norm)).to(dtype)


def optimizer_lamb_phase2(weights: list[torch.Tensor], adam_norms: list[torch.Tensor],
                          weight_norms: list[torch.Tensor], adam_steps: list[torch.Tensor],
                          neg_step: torch.Tensor, wd: float, use_lamb: bool) -> None:
    expect_same_lengths("optimizer_lamb_phase2", weights=weights, adam_norms=adam_norms,
                        weight_norms=weight_norms, adam_steps=adam_steps)
    for weight, adam_norm, weight_norm, adam_step in zip(weights, adam_norms, weight_norms,
                                                         adam_steps, strict=True):
        ratio = weight_norm.float() / adam_norm.float()
        if wd != 0 or use_lamb:
            ratio = torch.where((adam_norm > 0) & (weight_norm > 0), ratio,
                                torch.ones_like(ratio))
        else:
            ratio = torch.ones_like(ratio)
        weight.add_((adam_step.float() * neg_step.float() * ratio).to(weight.dtype))


def optimizer_ema(model_inputs: list[torch.Tensor], updated_ema: list[torch.Tensor],
                  decay: torch.Tensor) -> None:
    expect_same_lengths("optimizer_ema", model_inputs=model_inputs, updated_ema=updated_ema)
    d = decay.reshape(())
    for model, ema in zip(model_inputs, updated_ema, strict=True):
        if ema.is_floating_point():
            ema.mul_(d.to(ema.dtype)).add_((1.0 - d).to(ema.dtype) * model.detach())
