"""bitsandbytes 4-bit NF4 on Gaudi: a quantized model loaded with no ``device_map`` lands on
``hpu``, and its forward pass agrees with the unquantized model within NF4's error."""

from __future__ import annotations

import importlib.util
from typing import Any

from hpu_plugin.selftest import tiny
from hpu_plugin.selftest.harness import CannotRun, acquire, require, run

#: NF4 keeps each weight within half a level gap of its block's absmax: through this model's
#: two layers the logits move by about 10% RMS. Bounds on the logits against the unquantized
#: model: relative L2 error and cosine similarity.
MAX_RELATIVE, MIN_COSINE = 0.2, 0.98


def body() -> tuple[str, dict[str, Any]]:
    if importlib.util.find_spec("bitsandbytes") is None:
        raise CannotRun("bitsandbytes is not installed (pip install bitsandbytes to check it)")
    torch = acquire()
    from hpu_plugin.gaudi.generations import generation_from_name

    generation = generation_from_name(str(torch.hpu.get_device_name()))
    if generation is not None and not generation.supports("bitsandbytes"):
        raise CannotRun(f"bitsandbytes needs Gaudi2 or later; this is {generation.name}")
    import bitsandbytes as bnb
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    path = tiny.checkpoint()
    quantized = AutoModelForCausalLM.from_pretrained(
        path,
        quantization_config=BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4"),
    ).eval()
    devices = sorted({str(p.device) for p in quantized.parameters()})
    require(devices == ["hpu:0"], f"the NF4 model's parameters are on {devices}, not hpu:0")
    layers = [m for m in quantized.modules() if isinstance(m, bnb.nn.Linear4bit)]
    require(layers, "no layer was quantized to bitsandbytes Linear4bit")
    require(layers[0].weight.quant_state.quant_type == "nf4", "the quantization is not NF4")
    reference = AutoModelForCausalLM.from_pretrained(path).eval()
    ids = torch.randint(3, len(tiny.WORDS) + 3, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = quantized(ids.to("hpu")).logits.float().cpu()
        want = reference(ids).logits.float()
    require(bool(torch.isfinite(got).all()), "the NF4 forward pass gave non-finite logits")
    relative = float((got - want).norm() / want.norm())
    cosine = float(torch.nn.functional.cosine_similarity(got.flatten(), want.flatten(), dim=0))
    require(
        relative < MAX_RELATIVE and cosine > MIN_COSINE,
        f"NF4 logits vs unquantized: relative error {relative:.3f} (limit {MAX_RELATIVE}), "
        f"cosine {cosine:.4f} (limit {MIN_COSINE})",
    )
    return (
        f"{len(layers)} NF4 layers on hpu:0, logits within {relative:.2f} of unquantized",
        {"layers": len(layers), "relative": relative, "cosine": cosine,
         "bitsandbytes": bnb.__version__},
    )


if __name__ == "__main__":
    run("bitsandbytes-nf4", body)
