"""The emulated GPU Migration Toolkit behaves as Intel's API table documents, and only when
asked for: ``PT_HPU_GPU_MIGRATION=1``, or the script's own import of the toolkit."""

from __future__ import annotations

import json

import pytest

from .conftest import base_env, emulated_env, migrated_env, run

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("emulator")]

OFF = """
import json, sys, torch
print(json.dumps({
    "cuda": torch.cuda.is_available(),
    "loaded": sorted(m for m in sys.modules  # the plugin's own module is a few hooks
                     if m.endswith("gpu_migration") and not m.startswith("hpu_plugin.plugins")),
    "to_is_torchs": torch.Tensor.to is torch._C.TensorBase.to,
    "zeros_is_torchs": type(torch.zeros).__name__ == "builtin_function_or_method",
    "cuda_calls_are_torchs": torch.cuda.is_available.__module__ == "torch.cuda",
}))
"""


@pytest.mark.parametrize("setting", ["emulated, no opt-in", "opt-in, no Gaudi"])
def test_without_the_opt_in_nothing_of_it_loads(tmp_path, setting):
    env = emulated_env(tmp_path) if setting.startswith("emulated") else base_env(
        tmp_path, PT_HPU_GPU_MIGRATION="1")
    found = json.loads(run(OFF, env).stdout)
    assert found == {"cuda": False, "loaded": [], "to_is_torchs": True,
                     "zeros_is_torchs": True, "cuda_calls_are_torchs": True}


API_TABLE = """
import json, torch
out = {}
def refused(call):
    try:
        call()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "accepted"

out["is_available"] = torch.cuda.is_available()
out["device_count"] = torch.cuda.device_count()
torch.cuda.set_device(0)
out["current_device"] = torch.cuda.current_device()
out["name"] = torch.cuda.get_device_name(0)
out["capability"] = list(torch.cuda.get_device_capability())
props = torch.cuda.get_device_properties(0)
out["properties"] = [props.name, props.major, props.total_memory > 0]
out["bf16"] = torch.cuda.is_bf16_supported()
x = torch.zeros(4, device="cuda")
out["zeros"] = str(x.device)
out["randn_device"] = str(torch.randn(2, device=torch.device("cuda:0")).device)
out["tensor_cuda"] = str(torch.ones(2).cuda().device)
out["to_cuda_index"] = str(torch.ones(2).to("cuda:0").device)
out["to_int"] = str(torch.ones(2).to(0).device)
out["is_cuda"] = [x.is_cuda, torch.ones(1).is_cuda]
model = torch.nn.Linear(4, 2).cuda()
out["module_cuda"] = str(model.weight.device)
out["module_to"] = str(torch.nn.Linear(4, 2).to(torch.device("cuda")).weight.device)
with torch.device("cuda"):
    out["device_context"] = str(torch.nn.Linear(4, 2).weight.device)
out["memory_allocated"] = torch.cuda.memory_allocated() > 0
torch.cuda.reset_peak_memory_stats()
out["max_memory_allocated"] = torch.cuda.max_memory_allocated() > 0
free, total = torch.cuda.mem_get_info()
out["mem_get_info"] = 0 < free <= total
out["memory_reserved"] = torch.cuda.memory_reserved() > 0
torch.cuda.empty_cache()
torch.cuda.synchronize()
stream = torch.cuda.Stream()
with torch.cuda.stream(stream):
    y = x + 1
event = torch.cuda.Event()
event.record()
event.synchronize()
out["stream"] = y.sum().item()
torch.cuda.manual_seed(3)
a = torch.randn(3, device="cuda")
torch.cuda.manual_seed_all(3)
b = torch.randn(3, device="cuda")
out["seeded"] = torch.equal(a.cpu(), b.cpu())
with torch.autocast("cuda"):
    out["autocast"] = str((model(torch.randn(3, 4, device="cuda"))).dtype)
with torch.cuda.amp.autocast():
    out["cuda_amp_autocast"] = str((model(torch.randn(3, 4, device="cuda"))).dtype)
scaler = torch.cuda.amp.GradScaler()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler.scale(model(torch.randn(3, 4).cuda()).sum()).backward()
scaler.step(optimizer)
scaler.update()
out["grad_scaler"] = scaler.get_scale()
torch.backends.cudnn.benchmark = True
torch.backends.cudnn.deterministic = True
torch.backends.cuda.matmul.allow_tf32 = True
out["backend_flags"] = "accepted"
out["compile"] = torch.compile(lambda t: t * 2)(torch.ones(2, device="cuda")).sum().item()
out["data_parallel"] = refused(lambda: torch.nn.DataParallel(model))
out["cuda_graph"] = refused(lambda: torch.cuda.CUDAGraph())
out["cuda_1"] = refused(lambda: torch.zeros(1, device="cuda:1"))
print(json.dumps(out))
"""


def test_the_api_table_on_two_emulated_gaudi(tmp_path):
    done = run(API_TABLE, migrated_env(tmp_path, devices=2, GPU_MIGRATION_LOG_LEVEL="1"))
    out = json.loads(done.stdout.strip().splitlines()[-1])
    refusals = {key: out.pop(key) for key in ("data_parallel", "cuda_graph", "cuda_1")}
    assert out == {
        "is_available": True, "device_count": 2, "current_device": 0, "name": "GAUDI2",
        "capability": [9, 0], "properties": ["GAUDI2", 9, True], "bf16": True,
        "zeros": "hpu:0", "randn_device": "hpu:0", "tensor_cuda": "hpu:0",
        "to_cuda_index": "hpu:0", "to_int": "hpu:0", "is_cuda": [True, False],
        "module_cuda": "hpu:0", "module_to": "hpu:0", "device_context": "hpu:0",
        "memory_allocated": True,
        "max_memory_allocated": True, "mem_get_info": True, "memory_reserved": True,
        "stream": 4.0, "seeded": True, "autocast": "torch.bfloat16",
        "cuda_amp_autocast": "torch.bfloat16", "grad_scaler": 65536.0,
        "backend_flags": "accepted", "compile": 4.0,
    }
    # hpu_mismatch: the toolkit's refusal names the replacement
    assert refusals["data_parallel"].startswith("NotImplementedError: torch.nn.DataParallel")
    assert "DistributedDataParallel" in refusals["data_parallel"]
    assert refusals["cuda_graph"].startswith("NotImplementedError: torch.cuda.CUDAGraph")
    # cuda:1 is hpu:1, which a Gaudi process cannot address (one device per process)
    assert "habana active device: 1 != 0" in refusals["cuda_1"], refusals["cuda_1"]
    # GPU_MIGRATION_LOG_LEVEL: the mapped calls are logged
    assert "[gpu_migration] torch.zeros: device cuda -> hpu" in done.stderr


def test_a_script_that_imports_the_toolkit_itself(tmp_path):
    """The older way (Gaudi docs): ``import habana_frameworks.torch.gpu_migration`` first;
    with ``PT_HPU_CONVERT_FP16_TO_BF16_FOR_MIGRATION=1`` float16 becomes bfloat16."""
    script = """
    import habana_frameworks.torch.gpu_migration
    import torch
    print(torch.cuda.is_available(), torch.randn(2, device="cuda").device.type,
          torch.zeros(2, device="cuda", dtype=torch.float16).dtype,
          torch.ones(2).to("cuda", torch.float16).dtype)
    """
    env = emulated_env(tmp_path, PT_HPU_CONVERT_FP16_TO_BF16_FOR_MIGRATION="1")
    assert run(script, env).stdout.split() == ["True", "hpu", "torch.bfloat16", "torch.bfloat16"]


SAVED_ON_A_GPU = """
import json, sys, time, torch
import torch.serialization as serialization

# a checkpoint as a GPU machine writes it: its storages are tagged "cuda:0" (there is no GPU
# here, so the tag is what torch.save would write on one)
tag = serialization.location_tag
serialization.location_tag = lambda storage: "cuda:0"
torch.save({"w": torch.arange(4.0)}, sys.argv[1])
serialization.location_tag = tag
out = {}
for name, where in {"default": None, "cuda": "cuda:0",
                    "function": lambda storage, location: storage.cuda()}.items():
    w = torch.load(sys.argv[1], map_location=where)["w"]
    out[name] = [str(w.device), w.cpu().tolist()]
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
time.sleep(0.01)
end.record()
end.synchronize()
out["elapsed_ms"] = start.elapsed_time(end)
try:
    torch.cuda.get_device_properties(99)
    out["device_99"] = "answered"
except AssertionError as exc:
    out["device_99"] = str(exc)
print(json.dumps(out))
"""


def test_a_checkpoint_saved_on_a_gpu_loads_and_events_time_and_bad_indices_are_refused(
        tmp_path):
    """``torch.load`` of a checkpoint whose storages say ``cuda:0``, with no
    ``map_location``, with ``"cuda:0"`` and with a function calling ``storage.cuda()``;
    ``torch.cuda.Event(enable_timing=True)`` measures in milliseconds; an index past the
    devices is refused as CUDA refuses it."""
    import sys

    done = run("", migrated_env(tmp_path, devices=2),
               argv=[sys.executable, "-c", SAVED_ON_A_GPU, str(tmp_path / "gpu.pt")])
    out = json.loads(done.stdout.strip().splitlines()[-1])
    loaded = ["hpu:0", [0.0, 1.0, 2.0, 3.0]]
    assert {k: out[k] for k in ("default", "cuda", "function")} == dict.fromkeys(
        ("default", "cuda", "function"), loaded)
    assert 5 <= out["elapsed_ms"] < 5000, out
    assert out["device_99"] == "Invalid device id"


NVML = """
import json, torch
import pynvml
out = {}
def refused(call, *args):
    try:
        call(*args)
    except pynvml.NVMLError as exc:  # what NVML code catches
        return [type(exc).__name__, exc.value, str(exc)]
    return "accepted"

out["nvidia_module"] = getattr(pynvml, "__file__", None) is not None
pynvml.nvmlInit()
out["count"] = pynvml.nvmlDeviceGetCount()
handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(out["count"])]
out["names"] = [pynvml.nvmlDeviceGetName(h).decode() for h in handles]
uuid = pynvml.nvmlDeviceGetUUID(handles[1])
out["by_uuid"] = pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByUUID(uuid))
before = pynvml.nvmlDeviceGetMemoryInfo(handles[0])
x = torch.ones(1024, 1024, device="cuda")  # 4 MiB on this process's device
after = pynvml.nvmlDeviceGetMemoryInfo(handles[0])
other = pynvml.nvmlDeviceGetMemoryInfo(handles[1])
free, total = torch.cuda.mem_get_info()
out["memory"] = {
    "total_is_the_limit": after.total == total == other.total,
    "used_grew_by_the_tensor": after.used - before.used >= x.numel() * 4,
    "free": after.free == after.total - after.used == free,
    "other_device_untouched": other.used == 0,
}
out["driver_version"] = refused(pynvml.nvmlSystemGetDriverVersion)
out["temperature"] = refused(pynvml.nvmlDeviceGetTemperature, handles[0], 0)
out["bad_index"] = refused(pynvml.nvmlDeviceGetHandleByIndex, 2)
pynvml.nvmlInit()  # a library's own session inside the program's: NVML counts them
pynvml.nvmlShutdown()
out["after_inner_shutdown"] = refused(pynvml.nvmlDeviceGetCount)
pynvml.nvmlShutdown()
out["after_shutdown"] = refused(pynvml.nvmlDeviceGetCount)
print(json.dumps(out))
"""

#: NVIDIA's pynvml as far as the toolkit touches it (its ``NVMLError`` maps a return code to
#: a subclass; without an NVIDIA driver every call fails): stands for nvidia-ml-py, which
#: the test environment does not install.
NVIDIA_PYNVML = """
NVML_ERROR_UNINITIALIZED = 1
class NVMLError(Exception):
    def __new__(typ, value):
        obj = Exception.__new__(typ)
        obj.value = value
        return obj
    def __str__(self):
        return "Uninitialized"
def nvmlInit():
    raise NVMLError(9)  # NVML_ERROR_DRIVER_NOT_LOADED
def nvmlDeviceGetCount():
    raise NVMLError(NVML_ERROR_UNINITIALIZED)
def nvmlDeviceGetHandleByIndex(index):
    raise NVMLError(NVML_ERROR_UNINITIALIZED)
def nvmlSystemGetDriverVersion():
    raise NVMLError(NVML_ERROR_UNINITIALIZED)
"""


def _nvidia_pynvml(tmp_path) -> dict[str, str]:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "pynvml.py").write_text(NVIDIA_PYNVML)
    return {"PYTHONPATH": str(tmp_path / "site")}


@pytest.mark.parametrize("nvidia_pynvml", ["not installed", "installed"])
def test_pynvml_answers_with_the_emulated_gaudi(tmp_path, nvidia_pynvml):
    """The toolkit maps pynvml to pyhlml: NVML code counts and measures the Gaudi devices;
    what it does not map, or the emulator cannot read, fails naming the call."""
    extra = _nvidia_pynvml(tmp_path) if nvidia_pynvml == "installed" else {}
    out = json.loads(run(NVML, migrated_env(tmp_path, devices=2, **extra)).stdout
                     .strip().splitlines()[-1])
    refusals = {k: out.pop(k) for k in ("driver_version", "temperature", "bad_index",
                                        "after_inner_shutdown", "after_shutdown")}
    assert out.pop("nvidia_module") == (nvidia_pynvml == "installed")  # patched in place
    assert out == {
        "count": 2, "names": ["HL-225", "HL-225"], "by_uuid": 1,  # Gaudi2's product name
        "memory": {"total_is_the_limit": True, "used_grew_by_the_tensor": True, "free": True,
                   "other_device_untouched": True},
    }
    name, code, message = refusals["driver_version"]
    assert (name, code) == ("NotOnTheEmulator", 3)  # NVML_ERROR_NOT_SUPPORTED
    assert "pynvml.nvmlSystemGetDriverVersion is not mapped by the GPU Migration Toolkit" in message
    assert "pynvml.nvmlDeviceGetTemperature is mapped to pyhlml" in refusals["temperature"][2]
    assert refusals["bad_index"][1:] == [2, "Invalid Argument: device index 2; this server "
                                            "has 2 (0..1)"]
    assert refusals["after_inner_shutdown"] == "accepted"  # one of two sessions ended
    assert refusals["after_shutdown"][1] == 1  # NVML_ERROR_UNINITIALIZED


def test_without_the_opt_in_pynvml_is_left_alone(tmp_path):
    """NVIDIA's, where installed, stays NVIDIA's (torch imports it too): no driver here."""
    script = """
    import torch, pynvml
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        print(pynvml.nvmlInit.__module__, hasattr(pynvml, "NotOnTheEmulator"), exc.value)
    """
    done = run(script, emulated_env(tmp_path, **_nvidia_pynvml(tmp_path)))
    assert done.stdout.split() == ["pynvml", "False", "9"]  # NVML_ERROR_DRIVER_NOT_LOADED
