"""``hpu::ctc_loss_custom`` and its backward: the CTC loss behind ``hpex.kernels.CTCLoss``,
which optimum-habana's wav2vec2 uses on Gaudi2 and later.

Schema as the bridge declares it: ``ctc_loss_custom(log_probs, targets, input_lengths,
target_lengths, int blank, int reduction, bool zero_infinity) -> (loss, log_alpha)``, the
reduction as ``torch.nn._reduction.get_enum`` numbers it (0 none, 1 mean, 2 sum). The loss is
``torch.nn.functional.ctc_loss``'s: per-sample negative log-likelihood (infinite ones zeroed
with ``zero_infinity``), divided by the target lengths and averaged for ``mean``. The backward
takes the reduced loss's gradient and recomputes the per-sample likelihood it needs.

Unbatched input (``log_probs`` of ``(T, C)``, ``targets`` of ``(S,)``, 0-dim lengths) is one
sample, as the bridge's op takes it: its unreduced loss has the shape ``(1,)`` the bridge's
output shape gives (a batch of one), and the gradient has ``log_probs``' own shape.
"""

from __future__ import annotations

import torch

from hpu_emulator.kernels.checks import expect

NONE, MEAN, SUM = 0, 1, 2


Batch = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def _batched(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
             target_lengths: torch.Tensor) -> Batch:
    """Unbatched input as a batch of one (ATen's kernels take batches only)."""
    if log_probs.dim() == 2:
        return (log_probs.unsqueeze(1), targets.reshape(1, -1), input_lengths.reshape(1),
                target_lengths.reshape(1))
    return log_probs, targets, input_lengths, target_lengths


def _per_sample(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
                target_lengths: torch.Tensor, blank: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ops.aten._ctc_loss.Tensor(
        log_probs, targets, input_lengths.long(), target_lengths.long(), blank, False)


def ctc_loss_custom(log_probs: torch.Tensor, targets: torch.Tensor, input_lengths: torch.Tensor,
                    target_lengths: torch.Tensor, blank: int, reduction: int,
                    zero_infinity: bool) -> tuple[torch.Tensor, torch.Tensor]:
    expect(reduction in (NONE, MEAN, SUM),
           f"ctc_loss_custom: reduction must be 0 (none), 1 (mean) or 2 (sum), got {reduction}")
    log_probs, targets, input_lengths, target_lengths = _batched(
        log_probs, targets, input_lengths, target_lengths)
    nll, log_alpha = _per_sample(log_probs, targets, input_lengths, target_lengths, blank)
    if zero_infinity:
        nll = torch.where(torch.isinf(nll), torch.zeros_like(nll), nll)
    if reduction == MEAN:
        lengths = target_lengths.to(nll.dtype).clamp_min(1)
        return (nll / lengths).mean(), log_alpha
    if reduction == SUM:
        return nll.sum(), log_alpha
    return nll, log_alpha


def ctc_loss_custom_backward(grad: torch.Tensor, log_probs: torch.Tensor, targets: torch.Tensor,
                             input_lengths: torch.Tensor, target_lengths: torch.Tensor,
                             neg_log_likelihood: torch.Tensor, log_alpha: torch.Tensor,
                             blank: int, reduction: int, zero_infinity: bool) -> torch.Tensor:
    shape = log_probs.shape
    log_probs, targets, input_lengths, target_lengths = _batched(
        log_probs, targets, input_lengths, target_lengths)
    nll, _ = _per_sample(log_probs, targets, input_lengths, target_lengths, blank)
    batch = nll.shape[0]
    if reduction == MEAN:
        per_sample = grad / target_lengths.to(nll.dtype).clamp_min(1) / batch
    elif reduction == SUM:
        per_sample = grad.expand(batch)
    else:
        per_sample = grad
    return torch.ops.aten._ctc_loss_backward.Tensor(
        per_sample.reshape(batch).contiguous(), log_probs, targets, input_lengths.long(),
        target_lengths.long(), nll, log_alpha, blank, zero_infinity).reshape(shape)
