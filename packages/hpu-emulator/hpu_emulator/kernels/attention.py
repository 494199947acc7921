"""The bridge's fused attention ops (``hpu::sdpa_fwd``, ``sdpa_bwd``, ``sdpa_recomp_fwd``,
``sdpa_recomp_bwd``), computed with ordinary torch ops in float32.

``hpex.kernels.FusedSDPA`` calls these four (its Python source, ``FusedSDPA.py``): the
plain pair keeps the probabilities ``P`` (and the dropout mask) for the backward; the
recompute pair keeps only the softmax statistics (row maximum ``m`` and the inverse row sum
``linv``) and a dropout seed, and recomputes ``P`` in the backward. Shapes and dtypes of
every output follow the bridge's shape functions (``hpu_ops/backend/sdpa_gen.cpp``):

- ``sdpa_fwd`` -> ``(out, P, dm)``: ``P`` is ``[*batch, L, S]`` in q's dtype; ``dm`` the
  int8 dropout mask of that shape, or ``[1]`` when ``p == 0``.
- ``sdpa_recomp_fwd`` -> ``(out, m, linv, seed)``: ``m`` and ``linv`` are ``[*batch, L, 1]``
  when a backward is needed, else ``[1]``; ``linv`` is float32 (bf16 in the "fast" softmax
  with bf16 inputs); ``seed`` an int32 ``[1]``.

Batch dimensions broadcast as in ``matmul`` (the GQA path of ``FusedSDPA`` sends
``[B, G, H/G, L, D]`` queries with ``[B, G, 1, S, D]`` keys), and gradients are summed back
to each input's shape.

Masking: ``attention_mask`` is added (float) or selects (bool, True keeps) as in
``torch.nn.functional.scaled_dot_product_attention``; ``is_causal`` keeps key ``j <= i``
(top-left aligned, as torch); ``valid_seq_len`` (one count per batch row, inference with
``is_causal`` only, as ``FusedSDPA`` checks) masks the padding keys, which sit on the left
(``seq_padding_type="left"``) or on the right (``"right"``). Any other side is accepted and
masks nothing by length, as the bridge's kernel sets a padding flag only for those two words
(optimum-habana passes ``"None"`` with a mask). A query row with no key left (a padding row
under left padding) gives zeros instead of NaN.

Numerics: the scores, softmax and products are float32 and the results are rounded once to
q's dtype, in one way for inference and training alike, so that a pass without gradients
gives what the pass with them gives, as one kernel would. The "fast" softmax mode (on
hardware an approximation in reduced precision) is computed exactly here.
"""

from __future__ import annotations

import torch

from hpu_emulator.kernels.checks import expect, expect_float

PADDING_SIDES = ("left", "right")


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: float, softmax_mode: str,
           seq_padding_type: str, op: str) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        expect_float(op, name, t)
        expect(t.dim() >= 3, f"{op}: {name} must have at least 3 dims [batch..., seq, head_dim], "
               f"got shape {list(t.shape)}")
    expect(q.dtype == k.dtype == v.dtype,
           f"{op}: q, k, v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}; cast them")
    expect(q.shape[-1] == k.shape[-1],
           f"{op}: q and k head dims differ ({q.shape[-1]} vs {k.shape[-1]})")
    expect(k.shape[-2] == v.shape[-2],
           f"{op}: k and v sequence lengths differ ({k.shape[-2]} vs {v.shape[-2]})")
    expect(0.0 <= p < 1.0, f"{op}: dropout p must be in [0, 1), got {p}")


def _keep_mask(q: torch.Tensor, k: torch.Tensor, is_causal: bool,
               valid_seq_len: torch.Tensor | None, padding: str) -> torch.Tensor | None:
    """Boolean [*, L, S] of the keys each query may see, from causality and valid lengths."""
    length, source = q.shape[-2], k.shape[-2]
    keep = None
    if is_causal:
        keep = torch.ones(length, source, dtype=torch.bool, device=q.device).tril()
    if valid_seq_len is not None and padding.lower() in PADDING_SIDES:
        lengths = valid_seq_len.reshape(-1).to(device=q.device, dtype=torch.int64)
        positions = torch.arange(source, device=q.device)
        if padding.lower() == "left":
            valid = positions.view(1, -1) >= (source - lengths).view(-1, 1)
        else:
            valid = positions.view(1, -1) < lengths.view(-1, 1)
        shape = (valid.shape[0],) + (1,) * (q.dim() - 2) + (source,)
        valid = valid.view(shape)
        keep = valid if keep is None else keep & valid
    return keep


def _scores(q: torch.Tensor, k: torch.Tensor, attention_mask: torch.Tensor | None,
            scale: float, keep: torch.Tensor | None) -> torch.Tensor:
    scores = torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, float("-inf"))
        else:
            scores = scores + attention_mask.float()
    if keep is not None:
        scores = scores.masked_fill(~keep, float("-inf"))
    return scores


def _stats(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``exp(scores - m)``, row maximum ``m`` and inverse row sum ``linv``; rows with no
    visible key get m=0, linv=0."""
    m = scores.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    exps = torch.exp(scores - m)
    total = exps.sum(dim=-1, keepdim=True)
    linv = torch.where(total > 0, 1.0 / total, torch.zeros_like(total))
    return exps, m, linv


def _dropout_mask(shape: torch.Size, p: float, device: torch.device,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """int8 keep-mask (1 keeps); drawn on the CPU when a seeded generator is given."""
    if generator is not None:
        draw = torch.rand(shape, generator=generator).to(device)
    else:
        draw = torch.rand(shape, device=device)
    return (draw >= p).to(torch.int8)


def _forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             attention_mask: torch.Tensor | None, scale: float, is_causal: bool,
             valid_seq_len: torch.Tensor | None, padding: str
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Probabilities P (float32), row max m and inverse sum linv."""
    keep = _keep_mask(q, k, is_causal, valid_seq_len, padding)
    scores = _scores(q, k, attention_mask, scale, keep)
    exps, m, linv = _stats(scores)
    return exps * linv, m, linv


def _apply_dropout(probs: torch.Tensor, dm: torch.Tensor | None, p: float) -> torch.Tensor:
    if dm is None or p == 0.0:
        return probs
    return probs * dm.float() / (1.0 - p)


def sdpa_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             attention_mask: torch.Tensor | None, p: float, scale: float, is_causal: bool,
             softmax_mode: str, valid_seq_len: torch.Tensor | None, seq_padding_type: str
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check(q, k, v, p, softmax_mode, seq_padding_type, "sdpa_fwd")
    probs, _, _ = _forward(q, k, v, attention_mask, scale, is_causal, valid_seq_len,
                           seq_padding_type)
    dm = _dropout_mask(probs.shape, p, q.device) if p > 0.0 else None
    out = torch.matmul(_apply_dropout(probs, dm, p), v.float()).to(q.dtype)
    mask_out = dm if dm is not None else torch.zeros(1, dtype=torch.int8, device=q.device)
    return out, probs.to(q.dtype), mask_out


def _grads(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
           probs: torch.Tensor, dm: torch.Tensor | None, p: float, scale: float
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of q, k, v from float32 probabilities, summed back to broadcast inputs."""
    dout = dout.float()
    dropped = _apply_dropout(probs, dm, p)
    dv = torch.matmul(dropped.transpose(-2, -1), dout)
    dprobs = _apply_dropout(torch.matmul(dout, v.float().transpose(-2, -1)), dm, p)
    dscores = probs * (dprobs - (dprobs * probs).sum(dim=-1, keepdim=True)) * scale
    dq = torch.matmul(dscores, k.float())
    dk = torch.matmul(dscores.transpose(-2, -1), q.float())
    return (dq.sum_to_size(q.shape).to(q.dtype), dk.sum_to_size(k.shape).to(k.dtype),
            dv.sum_to_size(v.shape).to(v.dtype))


def sdpa_bwd(grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             P: torch.Tensor, dm: torch.Tensor | None, is_causal: bool, p: float, scale: float,
             fwd_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    mask = dm if (dm is not None and p > 0.0) else None
    return _grads(grad, q, k, v, P.float(), mask, p, scale)


def _seeded(seed: torch.Tensor) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(int(seed.reshape(-1)[0].item()) & 0x7FFFFFFF)
    return generator


def sdpa_recomp_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    attention_mask: torch.Tensor | None, p: float, scale: float,
                    is_causal: bool, requires_backward: bool, softmax_mode: str,
                    valid_seq_len: torch.Tensor | None, seq_padding_type: str
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    _check(q, k, v, p, softmax_mode, seq_padding_type, "sdpa_recomp_fwd")
    probs, m, linv = _forward(q, k, v, attention_mask, scale, is_causal, valid_seq_len,
                              seq_padding_type)
    # As the bridge (eager_custom_op_register.cpp, sdpa_recomp_fwd): a seed is drawn from the
    # device's generator only when there is dropout, so p == 0 leaves sampling with a seed
    # (generate) where the unfused attention leaves it.
    if p > 0.0:
        seed = torch.randint(0, 2**31 - 1, (1,), dtype=torch.int32, device=q.device)
        dm = _dropout_mask(probs.shape, p, q.device, _seeded(seed))
    else:
        seed, dm = torch.zeros(1, dtype=torch.int32, device=q.device), None
    out = torch.matmul(_apply_dropout(probs, dm, p), v.float()).to(q.dtype)
    if not requires_backward:
        # two tensors: a custom op's outputs may not alias each other (torch 2.12 refuses it)
        return (out, torch.zeros(1, dtype=q.dtype, device=q.device),
                torch.zeros(1, dtype=torch.float32, device=q.device), seed)
    fast_bf16 = softmax_mode.lower() == "fast" and q.dtype == torch.bfloat16
    return out, m.to(q.dtype), linv.to(torch.bfloat16 if fast_bf16 else torch.float32), seed


def sdpa_recomp_bwd(grad: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    attention_mask: torch.Tensor | None, m: torch.Tensor, linv: torch.Tensor,
                    seed: torch.Tensor | None, is_causal: bool, p: float, scale: float,
                    softmax_mode: str, fwd_out: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Recomputes P from q, k and the saved statistics, and the dropout mask from the seed."""
    scores = _scores(q, k, attention_mask, scale, _keep_mask(q, k, is_causal, None, "left"))
    probs = torch.exp(scores - m.float()) * linv.float()
    dm = None
    if p > 0.0:
        expect(seed is not None, "sdpa_recomp_bwd: dropout p > 0 needs the forward's seed")
        dm = _dropout_mask(probs.shape, p, q.device, _seeded(seed))
    return _grads(grad, q, k, v, probs, dm, p, scale)
