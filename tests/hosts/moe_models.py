"""Tiny mixture-of-experts models for the MoE tests' scripts, which run in a fresh emulated
interpreter: the source the scripts start with (torch and the model classes imported; the
models built seeded, dropout 0; greedy generation and four AdamW steps)."""

PRELUDE = r"""
import json, os
import torch
from transformers import (GptOssConfig, GptOssForCausalLM, MixtralConfig, MixtralForCausalLM,
                          Qwen3MoeConfig, Qwen3MoeForCausalLM)

SIZES = dict(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=4, num_key_value_heads=2, head_dim=8,
             max_position_embeddings=64, pad_token_id=0, attention_dropout=0.0)
MODELS = {
    "mixtral": lambda **kw: MixtralForCausalLM(MixtralConfig(
        **SIZES, num_local_experts=4, num_experts_per_tok=2, **kw)),
    "qwen3_moe": lambda **kw: Qwen3MoeForCausalLM(Qwen3MoeConfig(
        **SIZES, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=48,
        decoder_sparse_step=1, mlp_only_layers=[], **kw)),
    "gpt_oss": lambda **kw: GptOssForCausalLM(GptOssConfig(
        **SIZES, num_local_experts=4, num_experts_per_tok=2, sliding_window=16,
        layer_types=["sliding_attention", "full_attention"], **kw)),
}
IDS = torch.tensor([[0, 0, 0, 5, 9, 14, 27], [4, 8, 15, 16, 23, 42, 7]])
ROWS = torch.tensor([[5, 9, 14, 27, 3, 8, 11, 40], [4, 8, 15, 16, 23, 42, 7, 60]])

def made(name, device, **kw):
    torch.manual_seed(0)
    return MODELS[name](**kw).to(device)

def generate(model, device):
    ids = IDS.to(device)
    with torch.no_grad():
        out = model.eval().generate(input_ids=ids, attention_mask=(ids != 0).long(),
                                    max_new_tokens=8, do_sample=False)
    return out.cpu().tolist()

def train(model, device):
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids, losses = ROWS.to(device), []
    for _ in range(4):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses
"""
