"""Stand-in for ``habana_frameworks.torch.core.quantization``: the inference environment
functions optimum-habana and lightning-habana call (also re-exported by ``core``).

On Gaudi they switch the graph compiler to inference (weights as constants, a matmul layout)
and, in lazy mode, mark the model's parameters as constants; none of that changes results,
so the emulator keeps the switches and does nothing more. Given a model, the set-up function
gives it back with each ``BatchNorm2d`` that follows a ``Conv2d`` folded into the convolution,
as the bridge's does (``internal/fuse_conv_bn.py``), which callers assign:
``model = htcore.hpu_set_inference_env(model)``.
"""

import copy
from typing import Any

import torch


def _fuse_conv_bn(model: torch.nn.Module) -> torch.nn.Module:
    """The bridge's conditions and messages: an eval-mode model on the CPU that ``torch.fx``
    can trace, else the model itself; a copy otherwise (the caller's model is kept), a
    ``GraphModule`` whose ``Conv2d``-then-``BatchNorm2d`` pairs are one convolution where
    nothing else reads the convolution's output."""
    if model.training:
        print("Fusion is only applicable for eval mode")
        return model
    if any(not p.is_cpu for p in model.parameters()):
        print("This fusion pass is to be run for model on CPU, Skipping!")
        return model
    try:
        traced = torch.fx.symbolic_trace(copy.deepcopy(model))
    except Exception:
        print("Can not apply conv+bn fusion on a  non-fx traceable module, Skipping!")
        return model
    modules = dict(traced.named_modules())
    for node in list(traced.graph.nodes):
        if node.op != "call_module" or type(modules[node.target]) is not torch.nn.BatchNorm2d:
            continue
        source = node.args[0]
        if not isinstance(source, torch.fx.Node) or source.op != "call_module":
            continue
        if type(modules[source.target]) is not torch.nn.Conv2d or len(source.users) > 1:
            continue
        fused = torch.nn.utils.fusion.fuse_conv_bn_eval(modules[source.target],
                                                         modules[node.target])
        parent, _, name = source.target.rpartition(".")
        setattr(modules[parent] if parent else traced, name, fused)
        node.replace_all_uses_with(source)
        traced.graph.erase_node(node)
    traced.graph.lint()
    traced.recompile()
    return traced


def hpu_set_inference_env(model: torch.nn.Module | None = None) -> torch.nn.Module | None:
    """Inference mode for the graph compiler; call before moving the model to ``hpu``.
    Gives back ``model`` with its convolution and batch-norm pairs fused (``None`` without)."""
    torch.hpu.enable_inference_mode()
    torch.hpu.enable_matmul3d_2d_reshape()
    if model is not None:
        return _fuse_conv_bn(model)
    return None


def hpu_inference_initialize(model: torch.nn.Module | None = None,
                             mark_only_scales_as_const: bool = False,
                             optimizer: Any = None, args: Any = None) -> None:
    """The bridge marks the model's parameters as constants (lazy mode) for the graph
    compiler; results do not change, so nothing more is needed here."""


def hpu_teardown_inference_env() -> None:
    torch.hpu.disable_inference_mode()
    torch.hpu.disable_matmul3d_2d_reshape()


#: How many tensors ``_mark_params_as_const`` has marked: the bridge numbers them from 0
#: (``const_id``) in its tensors' extra metadata, a hint to the graph compiler.
#: Keyed by where the tensor's data is, as ``state_dict()`` hands out new tensor objects over
#: the same parameters each call.
_marked: dict[tuple[int, int, tuple[int, ...]], int] = {}
_const_id = -1


def _mark_params_as_const(model: torch.nn.Module | None = None, only_scales: bool = False,
                          console_prints: bool = False) -> None:
    """Number each tensor of the model's state (only ``scale`` entries with
    ``only_scales``) as a constant once, as the bridge does; results do not change."""
    global _const_id
    if model is None:
        return
    for name, tensor in model.state_dict().items():
        if only_scales and "scale" not in name:
            continue
        key = (tensor.data_ptr(), tensor.storage_offset(), tuple(tensor.shape))
        if key in _marked:
            if console_prints:
                print(f"Metadata already exists, const_id '{_marked[key]}'")
            continue
        _const_id += 1
        _marked[key] = _const_id
        if console_prints:
            print(f"Tensor '{name}' is_const 'True' id '{_const_id}'")


def _check_params_as_const(model: torch.nn.Module | None = None,
                           only_scales: bool = False) -> None:
    """The bridge's reads each tensor's constant flag and keeps nothing: no effect."""


def _get_marked_const_count() -> int:
    return _const_id + 1


#: The older names the bridge keeps ("to be deprecated"), which optimum-habana calls.
hpu_set_env = hpu_set_inference_env
hpu_initialize = hpu_inference_initialize
hpu_reset_env = hpu_teardown_inference_env
