"""Gaudi generations and what each supports.

- bf16: every generation (``torch.hpu.is_bf16_supported`` is True when available).
- fp16: not on first-generation Gaudi (Transformers ``is_torch_fp16_available_on_device``
  and Accelerate ``is_fp16_available`` both return False on Gaudi1).
- fp8: Gaudi2 and later (Accelerate falls back from fp8 to bf16 with a warning on Gaudi1).
- int64 on the device: Gaudi2 and later, as ``PT_ENABLE_INT64_SUPPORT`` says; unset, on in
  eager mode and off in lazy mode (the bridge's ``IsInt64Supported``: ``common/eager/utils.cpp``
  defaults to on, ``common/lazy/utils.cpp`` reads the switch alone); otherwise int64 tensors
  are cast to int32 on the device.
- bitsandbytes: Gaudi2 and later.
- fp8 E4M3 range: Gaudi2 saturates at +-240, later generations at torch's ``float8_e4m3fn``
  limit, 448 (the bridge's own ``cast_to_fp8_v2`` out-of-range test expects exactly that).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.gaudi.environment import INT64, LAZY_MODE, parse_int64_support, parse_lazy_mode
from hpu_plugin.gaudi.findings import Finding


@dataclass(frozen=True)
class Generation:
    name: str  # as torch.hpu.get_device_name() prints it
    number: int
    memory_gib: int  # HBM per device, nominal
    bf16: bool = True
    fp16: bool = True
    fp8: bool = True
    int64: bool = True
    bitsandbytes: bool = True
    product: str = ""  # as ``hl-smi -Q name`` prints it
    e4m3_max: float = 448.0  # largest finite fp8 E4M3 value of its MME/TPC casts


    def supports(self, feature: str) -> bool:
        return bool(getattr(self, feature))


GAUDI = Generation(
    "GAUDI", 1, 32, fp16=False, fp8=False, int64=False, bitsandbytes=False, product="HL-205"
)
GAUDI2 = Generation("GAUDI2", 2, 96, product="HL-225", e4m3_max=240.0)
GAUDI3 = Generation("GAUDI3", 3, 128, product="HL-325")
GENERATIONS: Mapping[str, Generation] = {g.name: g for g in (GAUDI, GAUDI2, GAUDI3)}

#: hl-smi product names: HL-20x Gaudi, HL-22x Gaudi2 (HL-225), HL-3xx Gaudi3 (HL-325L, HL-338).
_PRODUCT = re.compile(r"HL-?(2[0-1]|2[2-9]|3[0-9])[0-9A-Z]*", re.IGNORECASE)
_NAME = re.compile(r"GAUDI(?:\s*([123])[A-Z]?)?", re.IGNORECASE)


def generation_from_name(name: str) -> Generation | None:
    """The generation for a device name (``GAUDI2``, ``gaudi3``, ``HL-225``), or ``None``."""
    text = name.strip()
    match = _NAME.fullmatch(text)
    if match:
        number = match.group(1) or "1"
        return GENERATIONS["GAUDI" if number == "1" else "GAUDI" + number]
    match = _PRODUCT.fullmatch(text)
    if match:
        series = int(match.group(1))
        return GAUDI if series < 22 else GAUDI2 if series < 30 else GAUDI3
    return None


_DTYPES = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "torch.bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "torch.float16": "fp16",
    "fp8": "fp8",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "torch.float32": "fp32",
    "no": "fp32",
}
#: Every precision name ``check_dtype`` knows (what ``doctor --dtype`` accepts).
DTYPE_NAMES = frozenset(_DTYPES)


def check_dtype(generation: Generation, dtype: str, variable: str = "mixed_precision") -> None:
    """Raise when ``generation`` cannot compute in ``dtype`` (fp16 and fp8 need Gaudi2+)."""
    kind = _DTYPES.get(dtype.strip().lower())
    if kind is None or kind in ("bf16", "fp32"):
        return
    if generation.supports(kind):
        return
    supported = "bf16 and fp32" if kind == "fp16" else "bf16, fp16 and fp32"
    raise GaudiConfigError(
        variable,
        dtype,
        f"{supported} on {generation.name}; {kind} on GAUDI2 and GAUDI3",
        "use bf16 (e.g. TrainingArguments(bf16=True), accelerate --mixed_precision bf16)",
        problem=f"{kind} is not available on first-generation Gaudi",
    )


def int64_on_device(generation: Generation, environ: Mapping[str, str]) -> bool:
    """Whether int64 stays int64 on the device, as the Gaudi software decides it: Gaudi2+
    and ``PT_ENABLE_INT64_SUPPORT`` on, which unset means on in eager mode and off in lazy
    mode. Raises :class:`GaudiConfigError` for a switch value the Gaudi software would
    misread."""
    enabled = parse_int64_support(environ.get(INT64))
    lazy = parse_lazy_mode(environ.get(LAZY_MODE))
    return generation.int64 and (not lazy if enabled is None else enabled)


def int64_findings(generation: Generation | None, environ: Mapping[str, str]) -> list[Finding]:
    """Will int64 stay int64 on the device? Warnings, not errors: most models run with
    int64 cast to int32, yet values beyond the int32 range fail or wrap (optimum-habana#2089)."""
    raw = environ.get(INT64)
    try:
        enabled = parse_int64_support(raw)
        lazy = parse_lazy_mode(environ.get(LAZY_MODE))
    except GaudiConfigError as exc:
        return [exc.as_finding("int64")]
    findings = []
    if generation is not None and not generation.int64:
        findings.append(
            Finding(
                "int64",
                "warning",
                f"{generation.name} has no int64 on the device: int64 tensors become int32, and "
                "values beyond the int32 range fail",
                "use GAUDI2 or GAUDI3 for such values",
                INT64,
                raw,
            )
        )
    elif lazy and enabled is None:
        findings.append(
            Finding(
                "int64",
                "warning",
                f"{INT64} is unset in lazy mode, where it defaults to off: int64 token ids "
                "are cast to int32 on the device",
                f"set {INT64}=1",
                INT64,
                raw,
            )
        )
    elif enabled is False:
        findings.append(
            Finding(
                "int64",
                "warning",
                f"{INT64}={raw}: int64 token ids are cast to int32 on the device",
                f"unset {INT64} (the plugin then sets 1) or set it to 1",
                INT64,
                raw,
            )
        )
    else:
        findings.append(Finding("int64", "ok", "int64 stays int64 on the device", "", INT64, raw))
    return findings


#: bitsandbytes' HPU backend registers one kernel, ``bitsandbytes::dequantize_4bit``, and it
#: checks ``quant_type == "nf4"`` and uint8/bf16 storage
#: (bitsandbytes-foundation/bitsandbytes ``bitsandbytes/backends/hpu/ops.py``); its test helper
#: ``tests/helpers.py:is_supported_on_hpu`` excludes fp4 and float16. A maintainer: "we
#: support only NF4 inference on Gaudi". 8-bit runs through
#: bitsandbytes' generic PyTorch kernels with no HPU kernel, which its README lists for
#: Gaudi (LLM.int8) and the plugin supports it: a warning, not an error.
BNB_QUANT_TYPES = ("nf4",)


def bitsandbytes_findings(
    generation: Generation | None,
    bits: int,
    quant_type: str = "nf4",
    compute_dtype: str | None = None,
) -> list[Finding]:
    """Check a bitsandbytes request; raise :class:`GaudiConfigError` for what cannot run."""
    if generation is not None and not generation.bitsandbytes:
        raise GaudiConfigError(
            "load_in_4bit" if bits == 4 else "load_in_8bit",
            True,
            "bitsandbytes on GAUDI2 and GAUDI3",
            "load the model unquantized in bf16, or use GAUDI2/GAUDI3",
            problem=f"bitsandbytes does not run on first-generation Gaudi ({generation.name})",
        )
    if bits not in (4, 8):
        raise GaudiConfigError(
            "bits",
            bits,
            "4 (NF4) or 8",
            "use BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4')",
        )
    findings: list[Finding] = []
    if bits == 4:
        if quant_type.strip().lower() not in BNB_QUANT_TYPES:
            raise GaudiConfigError(
                "bnb_4bit_quant_type",
                quant_type,
                "'nf4' (the only 4-bit type bitsandbytes' HPU kernel has)",
                "use BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type='nf4')",
            )
        if compute_dtype is not None and _DTYPES.get(compute_dtype.strip().lower()) == "fp16":
            findings.append(
                Finding(
                    "bitsandbytes",
                    "warning",
                    "bnb_4bit_compute_dtype=float16 is not tested by bitsandbytes on HPU",
                    "use bnb_4bit_compute_dtype=torch.bfloat16",
                    "bnb_4bit_compute_dtype",
                    compute_dtype,
                )
            )
        findings.append(
            Finding("bitsandbytes", "ok", "4-bit NF4 has an HPU kernel in bitsandbytes")
        )
    else:
        # bitsandbytes 0.50 README lists LLM.int8 as supported on Gaudi2/3 and its test
        # suite runs Linear8bitLt on hpu; there is no HPU kernel, the generic PyTorch ones
        # run. ("NF4 only" in vllm#20172 is about vLLM's loader, not bitsandbytes.)
        findings.append(
            Finding(
                "bitsandbytes",
                "ok",
                "8-bit (LLM.int8) runs on bitsandbytes' generic PyTorch kernels on HPU",
            )
        )
    return findings
