"""Every method of DeepSpeed's accelerator interface, called on its HPU_Accelerator as
DeepSpeed's own code calls it, on one emulated device. Prints RESULT {method: outcome}."""
import json
import traceback

import torch
from deepspeed.accelerator import get_accelerator
from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator

acc = get_accelerator()
cpu = torch.ones(4)
on_hpu = torch.ones(4, device="hpu")
called = []

#: Arguments per method (none when not listed); the interface's own signatures.
ARGS = {
    "device_name": (0,), "device": (0,), "set_device": (0,), "default_generator": (0,),
    "set_rng_state": (lambda: (acc.get_rng_state(),)), "manual_seed": (0,),
    "manual_seed_all": (0,), "stream": (lambda: (acc.current_stream(),)),
    "range_push": ("step",), "lazy_call": (lambda: (lambda: called.append(1),)),
    "pin_memory": (cpu,), "pin_empty": (4,), "pin_empty_like": (cpu,), "is_pinned": (cpu,),
    "unpin_memory": (cpu,), "_torch_pin_memory": (cpu,), "_torch_empty_pinned": (cpu, (2,)),
    "_torch_is_pinned": (cpu,), "on_accelerator": (on_hpu,),
    "create_op_builder": ("FusedAdamBuilder",), "get_op_builder": ("FusedAdamBuilder",),
    "set_visible_devices_envs": ({}, [0]), "set_compile_backend": ("hpu_backend",),
    "capture_to_graph": (lambda: (acc.create_graph(),)),
    "replay_graph": None,  # below, with a capture
    "register_host_memory": (cpu.data_ptr(), cpu.numel() * 4),
    "unregister_host_memory": (cpu.data_ptr(),),
}
KWARGS = {"pin_empty": {"dtype": torch.float32}}
TENSORS = {"BFloat16Tensor", "ByteTensor", "DoubleTensor", "FloatTensor", "HalfTensor",
           "IntTensor", "LongTensor"}


def call(name):
    if name in TENSORS:
        return getattr(acc, name)([1, 2]).device.type
    member = getattr(acc, name)
    if not callable(member):  # a declared attribute (supports_nvtx_domain)
        return repr(member)
    args = ARGS.get(name, ())
    args = args() if callable(args) else args
    out = member(*args, **KWARGS.get(name, {}))
    if hasattr(out, "__enter__"):  # capture_to_graph: a context, entered as DeepSpeed does
        with out:
            pass
    return repr(out)[:80]


def graph_replay():
    """DeepSpeed's CUDA-graph path (engine.py _create_cuda_graph): capture on static
    tensors, then copy new values in and replay."""
    static_in = torch.ones(4, device="hpu")
    graph = acc.create_graph()
    with acc.capture_to_graph(graph):
        static_out = static_in * 2 + 1
    static_in.copy_(torch.full((4,), 3.0, device="hpu"))
    acc.replay_graph(graph)
    return static_out.cpu().tolist()


#: The interface: what DeepSpeedAccelerator declares (abstract or with a default), public.
methods = sorted({name for name in vars(DeepSpeedAccelerator) if not name.startswith("_")}
                 | DeepSpeedAccelerator.__abstractmethods__ | TENSORS)
outcomes = {}
for name in methods:
    if name == "replay_graph":
        continue
    try:
        outcomes[name] = ["ok", call(name)]
    except Exception as error:
        outcomes[name] = ["error", f"{type(error).__name__}: {error}",
                          traceback.format_exc()[-600:]]
try:
    outcomes["replay_graph"] = ["ok", graph_replay()]
except Exception as error:
    outcomes["replay_graph"] = ["error", f"{type(error).__name__}: {error}",
                                traceback.format_exc()[-600:]]
print("RESULT", json.dumps({"accelerator": type(acc).__name__, "lazy_call": called,
                            "outcomes": outcomes}), flush=True)
