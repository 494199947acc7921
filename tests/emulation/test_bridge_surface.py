"""The parts of the Gaudi software that code written for Gaudi reads besides the device:
``memory_stats()`` with the bridge's keys, ``utils.experimental.hpu``, the ``core``
environment functions, ``is_autocast_hpu_enabled``, ``hl-smi -v`` in the real format, and a
``habana-torch-plugin`` distribution that exists while emulating and never otherwise."""

from __future__ import annotations

import re

from hpu_plugin.gaudi.hlsmi import parse_version

#: lightning-habana 1.6.0's parser of ``hl-smi -v`` (resources._parse_hpu_synapse_versions),
#: and the line its doctest gives as the real tool's output.
LIGHTNING_HL = re.compile(r"hl-([\d\.]+)")
LIGHTNING_FW = re.compile(r"fw-([\d\.]+)")
REAL_LINE = "Habanalabs hl-smi/hlml version hl-1.11.0-fw-45.1.1.1 (Aug 04 2023 - 02:48:21)"

#: The keys of the bridge's ``get_mem_stats`` binding (hpu/csrc/bindings.cpp).
BRIDGE_KEYS = {"Limit", "InUse", "MaxInUse", "NumAllocs", "NumFrees", "ActiveAllocs",
               "MaxAllocSize", "TotalSystemAllocs", "TotalSystemFrees", "TotalActiveAllocs"}


def test_memory_stats_experimental_core_autocast_and_hl_smi_as_the_bridge_has_them(run):
    out = run(f"""
        import torch
        import habana_frameworks.torch.core as htcore
        import habana_frameworks.torch.utils.experimental as htexp
        import habana_frameworks.torch.hpu as hthpu

        stats = torch.hpu.memory_stats()
        assert set({sorted(BRIDGE_KEYS)!r}) <= set(stats), sorted(stats)
        big = torch.empty(1024 * 1024, device="hpu")
        small = torch.empty(16, device="hpu")
        stats = torch.hpu.memory_stats()
        assert stats["MaxAllocSize"] >= 4 * 1024 * 1024, stats
        assert stats["ActiveAllocs"] == stats["NumAllocs"] - stats["NumFrees"]
        del big
        torch.hpu.reset_accumulated_memory_stats()
        after = torch.hpu.memory_stats()
        assert after["NumAllocs"] == 0 and after["TotalSystemAllocs"] == stats["TotalSystemAllocs"]
        assert after["TotalActiveAllocs"] == after["TotalSystemAllocs"] - after["TotalSystemFrees"]

        # optimum-habana asks htexp.hpu for the device
        assert htexp.hpu.is_available() and htexp.hpu.device_count() == 8
        assert htexp.htmem.memory_stats()["Limit"] == stats["Limit"]

        # the environment functions optimum-habana calls for inference
        model = torch.nn.Linear(4, 4)
        htcore.hpu_set_env()
        model = model.to("hpu")
        htcore.hpu_initialize(model, mark_only_scales_as_const=True)
        with torch.no_grad():
            assert model(torch.ones(1, 4, device="hpu")).shape == (1, 4)
        htcore.hpu_reset_env()
        # and the ones lightning-habana calls through core.quantization
        htcore.quantization.hpu_set_inference_env()
        htcore.quantization.hpu_inference_initialize(model)
        htcore.quantization.hpu_teardown_inference_env()
        assert htcore.is_lazy() is False  # the plugin's default: eager

        assert hthpu.is_autocast_hpu_enabled() is False
        with torch.autocast("hpu", dtype=torch.bfloat16):
            assert hthpu.is_autocast_hpu_enabled() is True
            assert hthpu.get_autocast_hpu_dtype() == torch.bfloat16
        # hl-smi -v by name, as lightning-habana runs it, from a process that imported torch
        import subprocess
        print(subprocess.run(["hl-smi", "-v"], capture_output=True, text=True).stdout)
    """)
    line = out.stdout.strip()
    software, firmware = parse_version(line)
    assert LIGHTNING_HL.search(line).group(1) == software
    assert LIGHTNING_FW.search(line).group(1) == firmware
    major, minor, _ = (int(part) for part in software.split("."))
    assert (major, minor) >= (1, 14)  # what lightning-habana 1.6 checks for its features
    assert line.startswith("Habanalabs hl-smi/hlml version hl-")
    assert parse_version(REAL_LINE) == ("1.11.0", "45.1.1.1")  # the rule reads the real line


def test_habana_torch_plugin_is_visible_while_emulating_and_never_otherwise(run):
    show = """
import importlib.metadata, subprocess, sys
try:
    version = importlib.metadata.version("habana-torch-plugin")
except importlib.metadata.PackageNotFoundError:
    version = None
# optimum-habana reads it from `pip list`, in a child process
listed = subprocess.run([sys.executable, "-m", "pip", "list"], capture_output=True,
                        text=True, check=True).stdout
row = [line for line in listed.splitlines() if line.startswith("habana-torch-plugin ")]
print(version, row[0].split()[-1] if row else None)
"""
    emulated = run("import torch\n" + show).stdout.split()  # as a user's script runs
    from hpu_emulator.fake_hlsmi import SOFTWARE_VERSION

    assert emulated[0] == emulated[1] and emulated[0].startswith(SOFTWARE_VERSION + "."), emulated
    assert run(show, emulate=None).stdout.split() == ["None", "None"]  # no torch needed
    # emulation requested but switched off by the user: no emulator, so no distribution
    off = run(show, {"HPU_PLUGIN_DISABLE": "1"}).stdout.split()
    assert off[0] == "None", off


def test_answers_and_lazy_only_functions_follow_the_bridge(run):
    """What the bridge's ``torch.hpu``, step API, FusedSGD and FusedSDPA answer, so code that
    runs on the emulator behaves the same on a Gaudi (habana_frameworks/torch/hpu, core,
    hpex: gaudi-pytorch-bridge's Python sources)."""
    run("""
        import torch
        import habana_frameworks.torch.core as htcore
        from habana_frameworks.torch.hpex.kernels import FusedSDPA
        from habana_frameworks.torch.hpex.optimizers import FusedSGD

        # eager mode: the lazy-only step functions do nothing, a closure never runs
        ran = []
        htcore.add_step_closure(ran.append, ("closure",))
        htcore.mark_step()
        assert htcore.iter_mark_step() is None
        assert ran == [], ran

        # the cards of a server are peers; the same or an invalid id is an error
        assert torch.hpu.can_device_access_peer(0, 1) is True
        for pair, text in (((0, 0), "Both the ids are same."), ((0, 8), "Invalid device id : 8")):
            try:
                torch.hpu.can_device_access_peer(*pair)
            except AssertionError as exc:
                assert str(exc) == text, exc
            else:
                raise AssertionError(f"{pair} were called peers")

        # memory_usage is bytes in use; utilization needs Gaudi's pyhlml
        x = torch.empty(1024, device="hpu")
        assert torch.hpu.memory_usage() == torch.hpu.memory_stats()["InUse"] >= 4096
        try:
            torch.hpu.utilization()
        except ModuleNotFoundError as exc:
            assert "pyhlml" in str(exc)
        else:
            raise AssertionError("utilization() answered without pyhlml")

        # FusedSGD keeps its momentum in float32 for bf16 weights, as the bridge allocates it
        w = torch.nn.Parameter(torch.ones(4, dtype=torch.bfloat16, device="hpu"))
        w.grad = torch.full_like(w, 0.5)
        opt = FusedSGD([w], lr=0.1, momentum=0.9)
        opt.step()
        assert opt.state[w]["momentum_buffer"].dtype == torch.float32
        assert torch.allclose(w.float().cpu(), torch.full((4,), 0.95), atol=4e-3)

        # FusedSDPA: a softmax mode other than "fast" is the default mode, as in the kernel
        q = torch.randn(1, 2, 8, 16, device="hpu")
        plain = FusedSDPA.apply(q, q, q, None, 0.0, True)
        for mode in ("None", "fp32"):
            same = FusedSDPA.apply(q, q, q, None, 0.0, True, None, mode)
            assert torch.equal(same.cpu(), plain.cpu()), mode
        print("ok")
    """)
