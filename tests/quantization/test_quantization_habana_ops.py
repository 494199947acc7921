"""The emulator's ``hpu::dequantize_nf4`` against bitsandbytes' own dequantization.

The references are bitsandbytes' pure-PyTorch kernel (``backends/default/ops.py``, what
every device without a native kernel runs) and ``bitsandbytes.functional.dequantize_4bit``
on the CPU. The registration tests run in a subprocess: defining ops in the ``hpu``
namespace is process-wide and must not leak into the rest of the suite.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap

import bitsandbytes.functional as bnb_functional
import pytest
import torch
from bitsandbytes.backends.default import ops as bnb_default
from bitsandbytes.backends.utils import _get_4bit_code
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from hpu_emulator import habana_ops

BLOCKSIZES = (32, 64, 128, 256)


def quantize(shape: tuple[int, ...], blocksize: int, storage: torch.dtype = torch.uint8):
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(shape, generator=generator) * 0.05
    packed, state = bnb_functional.quantize_4bit(
        weight, blocksize=blocksize, quant_type="nf4", quant_storage=storage
    )
    return weight, packed, state


def default_kernel(packed: torch.Tensor, absmax: torch.Tensor, blocksize: int, shape, dtype):
    """bitsandbytes' pure-PyTorch dequantization, run eagerly (it is torch.compile'd)."""
    with torch.compiler.set_stance("force_eager"):
        return bnb_default._dequantize_4bit_compute(
            packed.view(torch.uint8).reshape(-1), absmax, _get_4bit_code("nf4", packed.device),
            blocksize, shape, dtype,
        )


def hpu_call(packed: torch.Tensor, absmax: torch.Tensor, blocksize: int, shape, dtype):
    """Our op, called with the arguments bitsandbytes' HPU kernel passes."""
    flat = habana_ops.dequantize_nf4(
        packed.view(torch.uint8).reshape(-1), absmax.to(dtype), blocksize,
        (math.prod(shape),), dtype,
    )
    return flat.reshape(shape)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 40),
    cols=st.integers(1, 300),
    blocksize=st.sampled_from(BLOCKSIZES),
    storage=st.sampled_from([torch.uint8, torch.bfloat16]),
)
def test_float32_output_equals_bitsandbytes_default_kernel(rows, cols, blocksize, storage):
    """Exact in float32: same codes, same scales, one float32 product per value."""
    # bf16 storage: bitsandbytes views the packed bytes as bf16, so their count is even
    assume(storage == torch.uint8 or math.ceil(rows * cols / 2) % 2 == 0)
    shape = (rows, cols)
    _, packed, state = quantize(shape, blocksize, storage)
    expected = default_kernel(packed, state.absmax, blocksize, shape, torch.float32)
    actual = hpu_call(packed, state.absmax, blocksize, shape, torch.float32)
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


@pytest.mark.parametrize("blocksize", BLOCKSIZES)
@pytest.mark.parametrize("shape", [(64, 256), (32, 512), (3, 5, 256)])
def test_float32_output_equals_functional_dequantize_4bit(shape, blocksize):
    """``bitsandbytes.functional.dequantize_4bit`` on the CPU, for shapes its CPU kernel
    handles: its AVX512 kernel assumes blocks do not cross rows, so the last dimension
    is a multiple of the block size (other shapes: the default-kernel test above)."""
    _, packed, state = quantize(shape, blocksize)
    expected = bnb_functional.dequantize_4bit(packed, state)
    actual = hpu_call(packed, state.absmax, blocksize, shape, torch.float32)
    torch.testing.assert_close(actual, expected, rtol=0, atol=0)


@pytest.mark.parametrize("storage", [torch.uint8, torch.bfloat16])
@pytest.mark.parametrize("shape", [(64, 64), (96, 40), (1, 1000)])
def test_bfloat16_output_within_one_rounding_of_reference(shape, storage):
    """bitsandbytes' HPU kernel hands the op absmax already cast to bf16, so the result
    differs from the float32 reference by the bf16 rounding of absmax and of the
    product: at most 2 * 2**-8 relative (bf16 has 8 significant bits)."""
    _, packed, state = quantize(shape, 64, storage)
    reference = default_kernel(packed, state.absmax, 64, shape, torch.float32)
    actual = hpu_call(packed, state.absmax, 64, shape, torch.bfloat16)
    assert actual.dtype == torch.bfloat16
    torch.testing.assert_close(actual.float(), reference, rtol=2 * 2**-8, atol=0)
    # and it is what bitsandbytes' own kernel gives for the same bf16 scales
    same_scales = default_kernel(packed, state.absmax.bfloat16().float(), 64, shape, torch.bfloat16)
    torch.testing.assert_close(actual, same_scales, rtol=2**-8, atol=0)


def test_dequantized_weights_approximate_the_original():
    """NF4 error bound: half the widest gap between levels (0.304 / 2) times the block's
    absmax; a check of the reference itself, independent of bitsandbytes' decoder."""
    weight, packed, state = quantize((128, 128), 64)
    actual = hpu_call(packed, state.absmax, 64, weight.shape, torch.float32)
    bound = state.absmax.repeat_interleave(64).reshape(weight.shape) * (0.3039 / 2) + 1e-7
    assert bool(((actual - weight).abs() <= bound).all())


def test_nibble_order_low_first_reads_swapped_bytes():
    _, packed, state = quantize((16, 64), 64)
    swapped = ((packed & 0x0F) << 4) | (packed >> 4)
    high = habana_ops.dequantize_nf4(
        packed.reshape(-1), state.absmax, 64, (16 * 64,), torch.float32
    )
    low = habana_ops.dequantize_nf4(
        swapped.reshape(-1), state.absmax, 64, (16 * 64,), torch.float32, high_nibble_first=False
    )
    torch.testing.assert_close(low, high, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"input": torch.zeros(8, dtype=torch.int8)}, "uint8"),
        ({"blocksize": 0}, "blocksize"),
        ({"out_shape": (64,)}, "out_shape"),
        ({"absmax": torch.ones(0)}, "absmax"),
    ],
)
def test_bad_arguments_are_errors_naming_the_argument(kwargs, message):
    arguments = {
        "input": torch.zeros(8, dtype=torch.uint8),
        "absmax": torch.ones(1),
        "blocksize": 16,
        "out_shape": (16,),
        "out_dtype": torch.float32,
    }
    arguments.update(kwargs)
    with pytest.raises(RuntimeError, match=message):
        habana_ops.dequantize_nf4(**arguments)


REGISTERED_SCRIPT = textwrap.dedent(
    """
    import math, torch
    import bitsandbytes.functional as F
    from hpu_emulator import habana_ops
    assert habana_ops.register() and habana_ops.register()  # idempotent
    # bitsandbytes' real HPU kernel for dequantize_4bit, reached through the dispatcher's
    # HPU key with CPU tensors: it checks its arguments, swaps nibbles for old Gaudi
    # software, and calls torch.ops.hpu.dequantize_nf4 exactly as it does on Gaudi.
    import bitsandbytes.backends.hpu.ops  # noqa: F401
    hpu_key = torch._C.DispatchKeySet(torch._C.DispatchKey.HPU)
    op = torch.ops.bitsandbytes.dequantize_4bit.default
    torch.manual_seed(0)
    for storage in (torch.uint8, torch.bfloat16):
        for shape in ((64, 64), (48, 128)):
            w = torch.randn(shape)
            q, s = F.quantize_4bit(w, blocksize=64, quant_type="nf4", quant_storage=storage)
            ref = F.dequantize_4bit(q, s)
            out = op.redispatch(hpu_key, q, s.absmax, 64, "nf4", list(shape), torch.float32)
            assert out.shape == ref.shape and out.dtype == torch.float32, (out.shape, out.dtype)
            torch.testing.assert_close(out, ref, rtol=0, atol=0)
            out = op.redispatch(hpu_key, q, s.absmax, 64, "nf4", list(shape), torch.bfloat16)
            torch.testing.assert_close(out.float(), ref, rtol=2 * 2**-8, atol=0)
    # the schema is the bridge's, and tracing sees shape and dtype
    schema = str(torch.ops.hpu.dequantize_nf4.default._schema)
    assert "SymInt blocksize, int[] out_shape, ScalarType out_dtype" in schema, schema
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        fake = torch.ops.hpu.dequantize_nf4(
            torch.empty(8, dtype=torch.uint8), torch.empty(1), 16, [16], torch.bfloat16)
    assert fake.shape == (16,) and fake.dtype == torch.bfloat16
    print("SW", bitsandbytes.backends.utils.GAUDI_SW_VER)
    """
)


def run(script: str, extra_path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("HPU_PLUGIN_EMULATE", None)
    if extra_path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [extra_path, env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )


def test_registered_op_serves_bitsandbytes_hpu_kernel():
    result = run("import bitsandbytes\n" + REGISTERED_SCRIPT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SW None" in result.stdout


def test_old_gaudi_software_gets_nibble_swapped_bytes_and_still_decodes(tmp_path):
    """With ``habana-torch-plugin`` 1.21 installed, bitsandbytes swaps nibbles before the
    call; the emulated op reads the version from the same place and decodes them."""
    dist = tmp_path / "habana_torch_plugin-1.21.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: habana-torch-plugin\nVersion: 1.21.0\n"
    )
    result = run("import bitsandbytes\n" + REGISTERED_SCRIPT, extra_path=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "SW 1.21.0" in result.stdout


def test_register_leaves_an_existing_definition_alone():
    script = textwrap.dedent(
        """
        import torch
        lib = torch.library.Library("hpu", "FRAGMENT")
        lib.define("dequantize_nf4(Tensor input, Tensor absmax, SymInt blocksize, "
                   "int[] out_shape, ScalarType out_dtype) -> Tensor")
        from hpu_emulator import habana_ops
        assert habana_ops.register() is False
        """
    )
    result = run(script)
    assert result.returncode == 0, result.stderr[-3000:]
