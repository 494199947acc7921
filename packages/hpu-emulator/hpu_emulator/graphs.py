"""HPU graphs of the emulated Gaudi: ``habana_frameworks.torch.hpu.graphs`` (also
``torch.hpu.graphs``; in lazy mode its names are in ``torch.hpu`` too, as the real package
star-imports them only when ``is_lazy()``).

What a user can tell on Gaudi, and what the emulator therefore does:

- ``HPUGraph.capture_begin()`` .. ``capture_end()`` records every operation on ``hpu``
  tensors; ``replay()`` runs the recorded work again on whatever the tensors the graph was
  captured with hold *now*: a user updates a static input in place (or ``wrap_in_hpu_graph``
  copies new inputs into it) and replays.
- Outputs live in the graph's memory: a replay writes its results into the very tensors the
  capture returned, so a reference kept from an earlier call sees the later values.
- Capturing compiles the captured graph once (``graph_compilation``, the recipe cache); a
  replay compiles nothing. ``wrap_in_hpu_graph`` captures a graph per distinct input
  signature (shapes, views, non-tensor values, autocast), up to ``max_graphs``.
- The bridge's refusals during capture, with its messages: a second capture, a replay during
  capture, a collective on ``hpu``.

The emulator records at the dispatcher (a ``TorchDispatchMode``, also on autograd's device
thread, so a backward captured by ``make_graphed_callables`` is recorded too) and replays
op by op with the CPU kernels; a result that is a fresh tensor is copied into the captured
one. Divergences are listed in the emulator's README.
"""

from __future__ import annotations

import collections
import copy
import gc
import hashlib
import inspect
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from functools import wraps
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from hpu_emulator import lazy, recipes

__all__ = [
    "CachedParams", "GraphModel", "HPUGraph", "ModuleCacher", "TensorPacker", "copy_to",
    "extract_tensors", "get_tensor_info", "get_user_input_tensor_list", "graph",
    "input_hash", "is_current_stream_capturing", "make_graphed_callables",
    "wrap_in_hpu_graph", "wrap_in_hpu_graph_func", "wrapped_hpugraph_forward",
]

_lock = threading.RLock()
#: The graph being captured in this process: the bridge allows one capture at a time.
_capturing: list[HPUGraph] = []


def _fatal(text: str) -> RuntimeError:
    """The bridge's ``PT_DEVICE_FATAL`` text (a c10::Error, RuntimeError in Python)."""
    rank = os.environ.get("RANK", "0").strip() or "0"
    return RuntimeError(f"[Rank:{rank}] FATAL ERROR :: MODULE:PT_DEVICE {text}")


class _Slot:
    """A tensor the recorded program produces or takes as a user input, by position."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


class _Node:
    __slots__ = ("aliases", "args", "func", "kwargs", "outs")

    def __init__(self, func: Any, args: Any, kwargs: Any, outs: list[Any],
                 aliases: list[bool]) -> None:
        self.func = func
        self.args = args
        self.kwargs = kwargs
        self.outs = outs  # per flattened output: the kept tensor, a _Slot, or None
        self.aliases = aliases  # per output: it is an input's memory (view, in-place, out=)


#: What a replay does with an op's output: copy it into the captured tensor, or keep it as
#: a value later ops read (a tensor the graph does not keep, ``disable_tensor_cache``).
_COPY, _SLOT = 0, 1
_Step = tuple[Any, Any, Any, bool, tuple[tuple[int, int, Any], ...]]


def _step(node: _Node) -> _Step | None:
    """A node as a replay runs it, or ``None`` when re-running it changes nothing: a view or
    a host read of tensors the graph keeps (its outputs already are that memory)."""
    slots = any(isinstance(v, _Slot) for v in tree_flatten((node.args, node.kwargs))[0])
    actions = []
    for index, (kept, alias) in enumerate(zip(node.outs, node.aliases, strict=True)):
        if isinstance(kept, _Slot):
            actions.append((index, _SLOT, kept.index))
        elif kept is not None and not alias:
            actions.append((index, _COPY, kept))
    schema = getattr(node.func, "_schema", None)
    mutates = schema is None or schema.is_mutable
    if not actions and not slots and not mutates:
        return None
    return node.func, node.args, node.kwargs, slots, tuple(actions)


def _below_autograd() -> Any:
    """Replay at the level ops were recorded at (below autograd and view tracking)."""
    guard = getattr(torch._C, "_AutoDispatchBelowADInplaceOrView", None)
    return guard() if guard is not None else torch.no_grad()


def _is_hpu(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "hpu"


class _DryRun:
    """What a dry-run capture leaves as it found it: the HPU generator's state and the memory
    of every tensor that existed before the capture began.

    The bridge builds a dry-run capture's graph without launching it ("avoid actual launch of
    recipe"): no random number is drawn and no tensor is written until the first replay, which
    ``wrap_in_hpu_graph`` runs at once and a ``make_graphed_callables`` function runs at its
    first call. The emulator runs the ops as it records them (they give the shapes and values
    the caller's Python goes on with), so it saves the generator's state and, before the first
    write into each storage the capture did not create, that storage's bytes, and puts both
    back when the capture ends.
    """

    def __init__(self) -> None:
        self.rng = torch.hpu.get_rng_state()
        self.fresh: set[int] = set()  # storages the capture created
        self.saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    @staticmethod
    def _written(func: Any, args: Any, kwargs: Any) -> Iterator[torch.Tensor]:
        schema = getattr(func, "_schema", None)
        if schema is None or not schema.is_mutable:
            return
        for position, argument in enumerate(schema.arguments):
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            if position < len(args):
                value = args[position]
            else:
                value = kwargs.get(argument.name)
            for leaf in tree_flatten(value)[0]:
                if _is_hpu(leaf) and leaf.numel():
                    yield leaf

    def before(self, func: Any, args: Any, kwargs: Any) -> None:
        for tensor in self._written(func, args, kwargs):
            storage = tensor.untyped_storage()
            pointer = storage.data_ptr()
            if pointer in self.fresh or pointer in self.saved:
                continue
            whole = torch.empty(0, dtype=torch.uint8, device=tensor.device)
            whole.set_(storage, 0, (storage.nbytes(),), (1,))
            self.saved[pointer] = (whole, whole.clone())

    def after(self, args: Any, kwargs: Any, out: Any) -> None:
        inputs = {v.untyped_storage().data_ptr() for v in tree_flatten((args, kwargs))[0]
                  if _is_hpu(v) and v.numel()}
        for value in tree_flatten(out)[0]:
            if _is_hpu(value) and value.numel():
                pointer = value.untyped_storage().data_ptr()
                if pointer not in inputs:
                    self.fresh.add(pointer)

    def undo(self) -> None:
        with torch.no_grad():
            for whole, before in self.saved.values():
                whole.copy_(before)
        self.saved.clear()
        torch.hpu.set_rng_state(self.rng)


class _Recorder(TorchDispatchMode):
    """Runs every op as usual and records those that touch ``hpu`` tensors."""

    def __init__(self, owner: HPUGraph) -> None:
        super().__init__()
        self.owner = owner

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "namespace", "") == "c10d" and any(
            _is_hpu(t) for t in tree_flatten((args, kwargs))[0]
        ):
            raise RuntimeError(
                "Expected context->getCapturing() == false to be true, but got false. "
                "collective nonSFG is not supported during hpu graph capturing"
            )
        dry = self.owner._dry
        if dry is not None:
            dry.before(func, args, kwargs)
        out = func(*args, **kwargs)
        if dry is not None:
            dry.after(args, kwargs, out)
        self.owner._record(func, args, kwargs, out)
        return out


class _Segment:
    """One graph of a capture: the ops between two step marks (the bridge's SingleHPUGraph)."""

    def __init__(self) -> None:
        self.nodes: list[_Node] = []

    def key(self) -> str:
        digest = hashlib.sha1()
        for node in self.nodes:
            digest.update(str(node.func).encode())
            leaves = tree_flatten((node.args, node.kwargs))[0]
            digest.update(repr(recipes.signature(
                [v for v in leaves if isinstance(v, (torch.Tensor, int, float, bool))]
            )).encode())
        return digest.hexdigest()[:16]


class HPUGraph:
    """A captured sequence of HPU work that :meth:`replay` runs again.

    As on the bridge: one capture at a time in a process, a replay while capturing is refused,
    ``replay`` writes into the outputs the capture produced.
    """

    def __init__(self) -> None:
        lazy.require_lazy("HPUGraph")
        self._segments: list[_Segment] = []
        self._recorder: _Recorder | None = None
        self._capturing = False
        self._dry: _DryRun | None = None
        self._user_inputs: dict[int, int] = {}  # id(tensor) -> position
        self._user_input_refs: list[torch.Tensor] = []
        self._slots = 0
        self._started = 0
        self._program: list[_Step] | None = None

    # ------------------------------------------------------------ capture

    def capture_begin(self, dry_run: bool = False) -> None:
        with _lock:
            if self._capturing or _capturing:
                raise _fatal("GRAPH:: graph Capture already in progress")
            lazy.flush()  # the bridge runs the accumulated graph before a capture
            self._segments = [_Segment()]
            self._dry = _DryRun() if dry_run else None
            self._capturing = True
            _capturing.append(self)
            self._started = time.perf_counter_ns()
            self._recorder = _Recorder(self)
            self._recorder.__enter__()

    def capture_end(self) -> None:
        with _lock:
            if not self._capturing:
                return  # as the bridge: nothing to end
            assert self._recorder is not None
            self._recorder.__exit__(None, None, None)
            self._recorder = None
            self._capturing = False
            _capturing.remove(self)
            if self._dry is not None:  # before the step mark: the undoing is no graph's work
                self._dry.undo()
                self._dry = None
            self._close_segment()
            self._user_input_refs = []  # the graph keeps no reference to marked inputs

    def _close_segment(self) -> None:
        """A step mark: the segment so far is compiled once (or found in the recipe cache)."""
        segment = self._segments[-1]
        lazy.discard_pending()  # its ops are this graph's, not the next mark_step's
        if segment.nodes:
            duration = max(1, (time.perf_counter_ns() - self._started) // 1000)
            recipes.account(segment.key(), (), "hpu_graph", duration)
            self._segments.append(_Segment())
        self._started = time.perf_counter_ns()

    def _step_marked(self) -> None:
        """``mark_step`` during capture splits the capture into graphs, as on the bridge."""
        if self._capturing:
            self._close_segment()

    def _record(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        leaves, _ = tree_flatten((args, kwargs))
        outs, _ = tree_flatten(out)
        if not any(_is_hpu(v) for v in leaves) and not any(_is_hpu(v) for v in outs):
            return  # host work is not part of an HPU graph
        memory = {v.untyped_storage().data_ptr() for v in leaves
                  if isinstance(v, torch.Tensor) and v.numel()}
        aliases = [isinstance(o, torch.Tensor) and o.numel() > 0
                   and o.untyped_storage().data_ptr() in memory for o in outs]
        if self._user_inputs:
            args, kwargs = tree_map(self._as_slot, (args, kwargs))
        kept = [o if isinstance(o, torch.Tensor) else None for o in outs]
        self._segments[-1].nodes.append(_Node(func, args, kwargs, kept, aliases))
        self._program = None

    def _as_slot(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and id(value) in self._user_inputs:
            return _Slot(self._user_inputs[id(value)])
        return value

    # ------------------------------------------------------------ replay

    def replay(self, asynchronous: bool = False) -> None:
        """Run the captured work again (``asynchronous`` changes nothing on the emulator,
        whose work is synchronous)."""
        self._replay(())

    def replayV2(
        self, static_tlist: list[torch.Tensor], tlist: list[torch.Tensor],
        asynchronous: bool = False,
    ) -> None:
        for static, new in zip(static_tlist, tlist, strict=False):
            if static is not new:
                static.copy_(new)
        self._replay(())

    def replayV3(
        self, tlistI: list[torch.Tensor], asynchronous: bool = False,
    ) -> None:
        """Replay reading the marked user inputs from ``tlistI`` (no copy into the graph)."""
        self._replay(tuple(tlistI))

    def _replay(self, inputs: Sequence[torch.Tensor]) -> None:
        with _lock:
            if self._capturing or _capturing:
                raise _fatal("GRAPH:: Capture in progress")
        lazy.flush()  # the bridge marks a step before replaying
        if self._program is None:
            self._program = [s for seg in self._segments for n in seg.nodes
                             if (s := _step(n)) is not None]
        env: dict[int, torch.Tensor] = dict(enumerate(inputs))

        def resolve(value: Any) -> Any:
            return env[value.index] if isinstance(value, _Slot) else value

        with _below_autograd():
            for func, args, kwargs, slots, actions in self._program:
                if slots:
                    args, kwargs = tree_map(resolve, (args, kwargs))
                result = func(*args, **kwargs)
                if not actions:
                    continue
                results = (result,) if isinstance(result, torch.Tensor) else tree_flatten(result)[0]
                for index, kind, target in actions:
                    if kind == _COPY:
                        target.copy_(results[index])
                    else:
                        env[target] = results[index]
        lazy.discard_pending()  # a replay runs a compiled graph: nothing to compile

    # ------------------------------------------------------------ tensor cache

    def mark_user_inputs(self, static_tlist: Sequence[torch.Tensor]) -> None:
        """Inputs a replay takes from its caller (``replayV3``) instead of the graph."""
        if not self._capturing:
            return
        self._user_input_refs = list(static_tlist)
        self._user_inputs = {id(t): i for i, t in enumerate(static_tlist)}
        self._slots = len(static_tlist)

    def mark_user_outputs(self, static_tlist: Sequence[torch.Tensor]) -> None:
        """Keep only these outputs (and what the program needs) in the graph's memory; the
        intermediate tensors are produced afresh by each replay (``disable_tensor_cache``)."""
        if self._capturing:
            raise _fatal("GRAPH:: Capture in progress")
        self._program = None
        wanted = {id(t) for t in static_tlist}
        wanted |= {id(t._base) for t in static_tlist if t._base is not None}
        produced: dict[int, _Slot] = {}
        for segment in self._segments:
            for node in segment.nodes:
                node.args, node.kwargs = tree_map(
                    lambda v, p=produced: p.get(id(v), v) if isinstance(v, torch.Tensor) else v,
                    (node.args, node.kwargs),
                )
                for position, kept in enumerate(node.outs):
                    if isinstance(kept, torch.Tensor) and id(kept) not in wanted:
                        slot = produced.get(id(kept))
                        if slot is None:
                            slot = produced[id(kept)] = _Slot(self._slots)
                            self._slots += 1
                        node.outs[position] = slot

    def clear_inputs(self) -> None:
        """Nothing is held for inputs beyond the tensors the program references."""

    def get_user_input_match_indices(self) -> list[int]:
        """Marked inputs that a replay need not copy: the emulator reads every marked input
        from the caller, so none."""
        return []

    def reset(self) -> None:
        """Forget the captured work and release the graph's memory."""
        self._segments = []
        self._program = None

    def __del__(self) -> None:
        if getattr(self, "_capturing", False):
            try:
                self.capture_end()
            except Exception:
                pass


def is_current_stream_capturing() -> bool:
    return bool(_capturing)


def _mark_step_during_capture() -> bool:
    for owner in list(_capturing):
        owner._step_marked()
    return bool(_capturing)


lazy._capture_step.append(_mark_step_during_capture)


class graph:
    """``with torch.hpu.graph(g): ...`` captures the block into ``g``."""

    default_capture_stream: Any = None

    def __init__(self, hpu_graph: HPUGraph, stream: Any = None, dry_run: bool = False) -> None:
        if graph.default_capture_stream is None:
            graph.default_capture_stream = torch.hpu.Stream()
        self.capture_stream = stream if stream is not None else graph.default_capture_stream
        self.stream_ctx = torch.hpu.stream(self.capture_stream)
        self.hpu_graph = hpu_graph
        self.dry_run = dry_run

    def __enter__(self) -> None:
        torch.hpu.synchronize()
        gc.collect()
        self.stream_ctx.__enter__()
        self.hpu_graph.capture_begin(self.dry_run)

    def __exit__(self, *exc: Any) -> None:
        self.hpu_graph.capture_end()
        self.stream_ctx.__exit__(*exc)


# ---------------------------------------------------------------- make_graphed_callables


def _check_callable(func: Any, args: Sequence[Any]) -> None:
    """The bridge's preconditions, with its texts."""
    if isinstance(func, torch.nn.Module):
        assert not (func._backward_hooks or func._forward_hooks or func._forward_pre_hooks), (
            "Modules must not have hooks registered at the time they are passed. However, "
            "registering hooks on modules after passing them through make_graphed_callables "
            "is allowed."
        )
        assert all(not b.requires_grad for b in func.buffers()), (
            "In any :class:`~torch.nn.Module` passed to :func:`~make_graphed_callables`, only "
            "parameters may be trainable. All buffers must have ``requires_grad=False``."
        )
    assert all(isinstance(a, torch.Tensor) for a in args), (
        "In the beta API, sample_args for each callable must be a tuple of Tensors. Other "
        "types and keywordargs are not allowed."
    )


class _Captured:
    """One callable's forward and backward graphs and their static tensors."""

    def __init__(self, func: Any, args: tuple[torch.Tensor, ...], allow_unused: bool,
                 dry_run: bool) -> None:
        self.func = func
        self.args = args
        self.params = tuple(func.parameters()) if isinstance(func, torch.nn.Module) else ()
        self.surface = args + self.params
        self.allow_unused = allow_unused
        self.dry_run = dry_run
        self.fwd = HPUGraph()
        self.bwd = HPUGraph()
        self.outputs: tuple[torch.Tensor, ...] = ()
        self.was_tensor = False
        self.grad_outputs: tuple[torch.Tensor | None, ...] = ()
        self.grad_inputs: tuple[torch.Tensor | None, ...] = ()

    def warm_up(self, count: int) -> None:
        for _ in range(count):
            outputs = self.func(*self.args)
            outputs = (outputs,) if isinstance(outputs, torch.Tensor) else tuple(outputs)
            torch.autograd.grad(
                outputs, tuple(i for i in self.surface if i.requires_grad),
                grad_outputs=tuple(torch.empty_like(o) for o in outputs),
                only_inputs=True, allow_unused=self.allow_unused,
            )

    def capture_forward(self) -> None:
        with graph(self.fwd, dry_run=self.dry_run):
            outputs = self.func(*self.args)
        self.was_tensor = isinstance(outputs, torch.Tensor)
        self.outputs = (outputs,) if self.was_tensor else tuple(outputs)

    def capture_backward(self) -> None:
        self.grad_outputs = tuple(
            torch.empty_like(o) if o.requires_grad else None for o in self.outputs
        )
        with graph(self.bwd, dry_run=self.dry_run):
            grads = torch.autograd.grad(
                tuple(o for o in self.outputs if o.requires_grad),
                tuple(i for i in self.surface if i.requires_grad),
                grad_outputs=tuple(g for g in self.grad_outputs if g is not None),
                only_inputs=True, allow_unused=self.allow_unused,
                materialize_grads=self.allow_unused,
            )
        it = iter(grads)
        self.grad_inputs = tuple(next(it) if i.requires_grad else None for i in self.surface)

    def function(self) -> Callable[..., Any]:
        captured = self

        class Graphed(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
                for static, new in zip(captured.args, inputs, strict=False):
                    if static is not new:
                        static.copy_(new)
                captured.fwd.replay()
                return tuple(o.detach() for o in captured.outputs)

            @staticmethod
            @torch.autograd.function.once_differentiable
            def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
                for static, grad in zip(captured.grad_outputs, grads, strict=False):
                    if static is not None and grad is not None:
                        static.copy_(grad)
                captured.bwd.replay()
                return tuple(g.detach() if g is not None else None for g in captured.grad_inputs)

        def functionalized(*user_args: torch.Tensor) -> Any:
            out = Graphed.apply(*(user_args + captured.params))
            return out[0] if captured.was_tensor else out

        return functionalized


def make_graphed_callables(
    callables: Any,
    sample_args: Any,
    warmups: int = 0,
    allow_unused_input: bool = False,
    asynchronous: bool = False,
    disable_tensor_cache: bool = False,
    dry_run: bool = False,
) -> Any:
    """Capture each callable's forward and backward into HPU graphs; return callables (or the
    modules, their ``forward`` replaced while in the training state they were captured in)
    whose calls replay them. ``disable_tensor_cache`` implies ``dry_run``, as on the bridge."""
    single = not isinstance(callables, tuple)
    if single:
        callables, sample_args = (callables,), (sample_args,)
    for func, args in zip(callables, sample_args, strict=True):
        _check_callable(func, args)
    captured = [
        _Captured(f, tuple(a), allow_unused_input, dry_run or disable_tensor_cache)
        for f, a in zip(callables, sample_args, strict=True)
    ]
    for c in captured:
        c.warm_up(warmups)
    for c in captured:
        c.capture_forward()
    for c in reversed(captured):
        c.capture_backward()
    results = []
    for c in captured:
        graphed = c.function()
        if isinstance(c.func, torch.nn.Module):
            c.func.forward = _graphed_forward(c.func, c.func.training, graphed, c.func.forward)
            results.append(c.func)
        else:
            results.append(graphed)
    return results[0] if single else tuple(results)


def _graphed_forward(module: torch.nn.Module, training: bool, graphed: Callable[..., Any],
                     original: Callable[..., Any]) -> Callable[..., Any]:
    def forward(*user_args: Any) -> Any:
        if module.training == training:
            return graphed(*user_args)
        return original(*user_args)

    return forward


# ---------------------------------------------------------------- wrap_in_hpu_graph


class CachedParams:
    def __init__(self, graph_inputs: Any, graph_outputs: Any, graph: HPUGraph,
                 out_tinfo_list: Any = None, asynchronous: bool = False) -> None:
        self.graph_inputs = graph_inputs
        self.graph_outputs = graph_outputs
        self.graph = graph
        self.out_tinfo_list = out_tinfo_list
        self.asynchronous = asynchronous


def _view_hash(tensor: torch.Tensor) -> int:
    """What the bridge's ``get_view_hash`` distinguishes: the tensor's view of its storage."""
    return hash((tuple(tensor.stride()), tensor.storage_offset(), str(tensor.dtype),
                 tensor.device.type))


def input_hash(obj: Any) -> int:
    """The key of a graph in ``wrap_in_hpu_graph``'s cache: structure, shapes and views of
    tensors (not their values), other values themselves, and whether HPU autocast is on."""
    autocast = torch.hpu.is_autocast_hpu_enabled()
    if isinstance(obj, dict):
        return input_hash(tuple(obj.items()))
    if isinstance(obj, list) or (isinstance(obj, tuple) and not isinstance(obj, torch.Size)):
        return hash((tuple(input_hash(el) for el in obj), autocast))
    if torch.is_tensor(obj):
        return hash((obj.shape, _view_hash(obj), autocast))
    if isinstance(obj, collections.UserDict):
        return hash(tuple((k, tuple(v)) for k, v in obj.items()))
    return hash((obj, autocast))


def copy_to(dst: Any, src: Any) -> None:
    assert type(dst) is type(src)
    if isinstance(dst, dict):
        for (dk, dv), (sk, sv) in zip(dst.items(), src.items(), strict=False):
            assert dk == sk
            copy_to(dv, sv)
    elif isinstance(dst, list) or (isinstance(dst, tuple) and not isinstance(dst, torch.Size)):
        for d, s in zip(dst, src, strict=False):
            copy_to(d, s)
    elif torch.is_tensor(dst) and dst is not src:
        dst.copy_(src, non_blocking=True)


def get_user_input_tensor_list(inputs: Any, tlist: tuple[Any, ...]) -> tuple[Any, ...]:
    if isinstance(inputs, dict):
        for item in inputs.items():
            tlist = get_user_input_tensor_list(item, tlist)
    elif isinstance(inputs, (list, tuple)):
        for item in inputs:
            tlist = get_user_input_tensor_list(item, tlist)
    elif torch.is_tensor(inputs):
        tlist = (*tlist, inputs)
    return tlist


def extract_tensors(data: Any) -> list[torch.Tensor]:
    if isinstance(data, torch.Tensor):
        return [data]
    if isinstance(data, (list, tuple)):
        return [t for item in data for t in extract_tensors(item)]
    if isinstance(data, dict):
        return [t for value in data.values() for t in extract_tensors(value)]
    if hasattr(data, "__dict__"):
        return [t for value in vars(data).values() for t in extract_tensors(value)]
    return []


def get_tensor_info(tensor: torch.Tensor) -> dict[str, Any]:
    return {"shape": tensor.shape, "dtype": tensor.dtype, "device": tensor.device}


def _env_switch(name: str, given: bool) -> bool:
    raw = os.environ.get(name)
    return given if raw is None else raw == "1"


def wrapped_hpugraph_forward(
    cache: dict[int, CachedParams], stream: Any, orig_fwd: Callable[..., Any], args: Any,
    kwargs: dict[str, Any], disable_tensor_cache: bool, asynchronous: bool, dry_run: bool,
    max_graphs: int | None,
) -> Any:
    """Capture on the first call with a new input signature, replay on the next ones.

    The bridge's keyword arguments are honoured: ``bypass_hpu_graphs=True`` runs the plain
    forward, ``warmup_mode=True`` returns the cached outputs without replaying, and
    ``cache_tensors_list`` names more tensors to keep. ``PT_HPUGRAPH_DISABLE_TENSOR_CACHE``
    overrides ``disable_tensor_cache``; a disabled tensor cache implies ``dry_run``.
    """
    warmup_mode = kwargs.pop("warmup_mode", False)
    if kwargs.pop("bypass_hpu_graphs", False):
        return orig_fwd(*args, **kwargs)
    inputs = (args, kwargs)
    key = input_hash(inputs)
    cached = cache.get(key)
    extra = extract_tensors(kwargs.pop("cache_tensors_list", []))
    disable_tensor_cache = _env_switch("PT_HPUGRAPH_DISABLE_TENSOR_CACHE", disable_tensor_cache)
    dry_run = True if disable_tensor_cache else dry_run
    if cached is None:
        if max_graphs is not None and len(cache) == max_graphs:
            return orig_fwd(*args, **kwargs)
        g = HPUGraph()
        g.capture_begin(dry_run=dry_run)
        user_inputs = get_user_input_tensor_list(inputs, ())
        if disable_tensor_cache:
            g.mark_user_inputs(user_inputs)
        try:
            outputs = orig_fwd(*args, **kwargs)
        finally:
            g.capture_end()
        if disable_tensor_cache:
            tensors = extract_tensors(outputs)
            g.mark_user_outputs(extra + tensors)
            cache[key] = CachedParams((), outputs, g, [get_tensor_info(t) for t in tensors],
                                      asynchronous)
            g.replayV3(list(user_inputs), asynchronous)  # a dry run's first run, as there
        else:
            cache[key] = CachedParams(inputs, outputs, g, None, asynchronous)
            if dry_run:
                g.replay(asynchronous)
        return outputs
    if warmup_mode:
        lazy.mark_step()
        return cached.graph_outputs
    if disable_tensor_cache:
        cached.graph.replayV3(list(get_user_input_tensor_list(inputs, ())), cached.asynchronous)
    else:
        copy_to(cached.graph_inputs, inputs)
        cached.graph.replay(cached.asynchronous)
    return cached.graph_outputs


def wrap_in_hpu_graph_func(func: Callable[..., Any], asynchronous: bool = False,
                           disable_tensor_cache: bool = False, dry_run: bool = False,
                           max_graphs: int | None = None) -> Callable[..., Any]:
    """A function whose calls are captured and replayed as ``wrap_in_hpu_graph`` does."""
    cache: dict[int, CachedParams] = {}

    def forward(*args: Any, **kwargs: Any) -> Any:
        return wrapped_hpugraph_forward(cache, None, func, args, kwargs, disable_tensor_cache,
                                        asynchronous, dry_run, max_graphs)

    return forward


def wrap_in_hpu_graph(module: torch.nn.Module, asynchronous: bool = False,
                      disable_tensor_cache: bool = False, dry_run: bool = False,
                      max_graphs: int | None = None) -> torch.nn.Module:
    """Replace ``module.forward`` with one that captures an HPU graph per input signature
    and replays it; adds ``module.clear_cache()`` and ``module.clear_inputs()``. Returns the
    module itself, changed in place."""
    lazy.require_lazy("wrap_in_hpu_graph")
    cache: dict[int, CachedParams] = {}
    orig_fwd = module.forward

    @wraps(orig_fwd)
    def forward(*args: Any, **kwargs: Any) -> Any:
        return wrapped_hpugraph_forward(cache, None, orig_fwd, args, kwargs,
                                        disable_tensor_cache, asynchronous, dry_run, max_graphs)

    def clear_cache() -> None:
        cache.clear()

    def clear_inputs() -> None:
        for cached in cache.values():
            cached.graph.clear_inputs()

    module.forward = forward  # type: ignore[method-assign]
    module.clear_cache = clear_cache  # type: ignore[assignment]
    module.clear_inputs = clear_inputs  # type: ignore[assignment]
    return module


# ---------------------------------------------------------------- ModuleCacher


class TensorPacker:
    """Flattens nested tuples, lists and dicts of tensors into a tuple and back."""

    class Index:
        def __init__(self, value: int) -> None:
            self.value = value

        def __repr__(self) -> str:
            return f"#{self.value:d}"

    def __init__(self, is_out_pack: bool = False, verbose: bool = False) -> None:
        self._is_out_pack = is_out_pack
        self._verbose = verbose

    def pack(self, outs: Any) -> tuple[tuple[torch.Tensor, ...], Any]:
        tensors: list[torch.Tensor] = []
        metadata = self._pack(outs, tensors)
        return tuple(tensors), metadata

    def _pack(self, outs: Any, tensors: list[torch.Tensor]) -> Any:
        if torch.is_tensor(outs):
            tensors.append(outs)
            return self.Index(len(tensors) - 1)
        if isinstance(outs, tuple):
            return tuple(self._pack(item, tensors) for item in outs)
        if isinstance(outs, dict):
            meta = copy.copy(outs)
            for key in outs:
                meta[key] = self._pack(outs[key], tensors)
            return meta
        if isinstance(outs, list):
            meta_list = copy.copy(outs)
            for i, item in enumerate(outs):
                meta_list[i] = self._pack(item, tensors)
            return meta_list
        if self._verbose:
            print(f"[WARNING] Variable of type {type(outs)} will not be dynamic")
        return outs

    def unpack(self, tensors: Sequence[torch.Tensor], metadata: Any) -> Any:
        if isinstance(metadata, self.Index):
            return tensors[metadata.value]
        if isinstance(metadata, tuple):
            return tuple(self.unpack(tensors, item) for item in metadata)
        if isinstance(metadata, dict):
            data = copy.copy(metadata)
            for key in metadata:
                data[key] = self.unpack(tensors, metadata[key])
            return data
        if isinstance(metadata, list):
            data_list = copy.copy(metadata)
            for i, item in enumerate(metadata):
                data_list[i] = self.unpack(tensors, item)
            return data_list
        return metadata


class GraphModel(torch.nn.Module):
    """A module's forward over packed tensors, graphed with ``make_graphed_callables``."""

    def __init__(self, model: torch.nn.Module, allow_unused_input: bool = False,
                 asynchronous: bool = False, disable_tensor_cache: bool = False,
                 dry_run: bool = False) -> None:
        super().__init__()
        assert not isinstance(
            model, (torch.nn.parallel.DataParallel, torch.nn.parallel.DistributedDataParallel)
        ), "Use DataParallel/DistributedDataParallel only after wrapping with ModuleCacher"
        self.model = model
        self.input_packer = TensorPacker()
        self.input_meta: Any = None
        self.output_packer = TensorPacker(is_out_pack=True)
        self.output_meta: Any = None
        self.func_parameters = self.process_function_signature(self.model.forward)
        self.allow_unused_input = allow_unused_input
        self.asynchronous = asynchronous
        self.disable_tensor_cache = disable_tensor_cache
        self.dry_run = dry_run

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        outs = self.model(**self.input_packer.unpack(args, self.input_meta))
        tensors, self.output_meta = self.output_packer.pack(outs)
        return tensors

    def graph_forward(self, *args: Any, **kwargs: Any) -> Any:
        full = GraphModel.get_full_args(self.func_parameters, *args, **kwargs)
        tensors, _ = self.input_packer.pack(full)
        return self.output_packer.unpack(self.hpu_graph(*tensors), self.output_meta)

    def init_hpu_graph(self, *args: Any, **kwargs: Any) -> None:
        full = GraphModel.get_full_args(self.func_parameters, *args, **kwargs)
        self.input_id = input_hash(full)
        tensors, self.input_meta = self.input_packer.pack(full)
        self.hpu_graph = make_graphed_callables(
            self, tensors, allow_unused_input=self.allow_unused_input,
            asynchronous=self.asynchronous, disable_tensor_cache=self.disable_tensor_cache,
            dry_run=self.dry_run,
        )

    @staticmethod
    def process_function_signature(function: Callable[..., Any]) -> collections.OrderedDict:
        params: collections.OrderedDict = collections.OrderedDict(
            inspect.signature(function).parameters)
        unsupported = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.VAR_POSITIONAL)
        for key in list(params):
            kind = params[key].kind
            assert kind not in unsupported, f"Unsupported argument type : {kind}"
            if kind == inspect.Parameter.VAR_KEYWORD:
                print("[WARNING] Variable keyword arguments will not be supported.")
                del params[key]
                continue
            params[key] = params[key].default
        return params

    @staticmethod
    def get_full_args(forward_params: collections.OrderedDict, *args: Any,
                      **kwargs: Any) -> collections.OrderedDict:
        full = copy.copy(forward_params)
        for index, key in enumerate(full):
            if index == len(args):
                break
            full[key] = args[index]
        full.update(kwargs)
        return full

    @staticmethod
    def full_input_hash(forward_params: collections.OrderedDict, *args: Any,
                        **kwargs: Any) -> int:
        return input_hash(GraphModel.get_full_args(forward_params, *args, **kwargs))


class ModuleCacher(torch.nn.Module):
    """``ModuleCacher(max_graphs)(model, ...)``: graphs a model's training forward (and its
    backward) per input signature, in lazy mode, while grad is enabled; other calls (eval,
    ``no_grad``, beyond ``max_graphs``) run the plain forward and are counted."""

    def __init__(self, max_graphs: int = 10) -> None:
        super().__init__()
        self.max_graphs = max_graphs
        self.model_dict: dict[int, GraphModel] = {}
        self.input_count_dict: dict[int, int] = {}
        self.priority_keys: list[int] = []
        self.is_capturing = False
        self.iteration_cnt = -1
        self.use_lazy_mode = os.environ.get("PT_HPU_LAZY_MODE", "1") == "1"
        self.hpugraph_tracing = False
        self.cached_hits_dict: dict[int, int] = {}
        self.uncached_train_hits = 0
        self.uncached_eval_hits = 0
        self.forward_cnt = 0
        self.set_iterations_call_cnt = 0
        self.disable_tensor_cache = False
        self.dry_run = False
        self.inplace = True

    def __call__(  # type: ignore[override]
        self, model: torch.nn.Module, use_lfu: bool = False, inplace: bool = True,
        allow_unused_input: bool = False, asynchronous: bool = False,
        have_grad_accumulation: bool = False, log_frequency: int = 100, verbose: bool = False,
        disable_tensor_cache: bool = False, dry_run: bool = False,
    ) -> torch.nn.Module:
        model.is_hpugraph_tracing = self.is_hpugraph_tracing  # type: ignore[assignment]
        self.inplace = inplace
        if not inplace:
            model = copy.copy(model)
        self.orig_model = copy.copy(model)
        self.forward_params = GraphModel.process_function_signature(self.orig_model.forward)
        self.model = model
        self.use_lfu = use_lfu
        model.orig_forward = model.forward  # type: ignore[assignment]
        model.forward = self.forward_lfs if use_lfu else self.forward  # type: ignore[method-assign]
        self.allow_unused_input = allow_unused_input
        self.asynchronous = asynchronous
        self.have_grad_accumulation = have_grad_accumulation
        model.set_iteration_count = self.set_iteration_count  # type: ignore[assignment]
        model.capture_start = self.capture_start  # type: ignore[assignment]
        model.capture_end = self.capture_end  # type: ignore[assignment]
        self.verbose = verbose
        self.log_frequency = log_frequency
        self.disable_tensor_cache = _env_switch("PT_HPUGRAPH_DISABLE_TENSOR_CACHE",
                                                disable_tensor_cache)
        self.dry_run = _env_switch("PT_HPUGRAPH_ENABLE_DRY_RUN", dry_run)
        return model

    def set_iteration_count(self, iter_num: int) -> None:
        self.forward_cnt = iter_num
        self.set_iterations_call_cnt += 1

    def is_hpugraph_tracing(self) -> bool:
        return self.hpugraph_tracing

    def cache_replay(self, input_id: int, *args: Any, **kwargs: Any) -> Any:
        self.cached_hits_dict[input_id] = self.cached_hits_dict.get(input_id, 0) + 1
        return self.model_dict[input_id].graph_forward(*args, **kwargs)

    def cache_insert(self, input_id: int, *args: Any, **kwargs: Any) -> Any:
        self.hpugraph_tracing = True
        graph_model = GraphModel(self.orig_model, self.allow_unused_input, self.asynchronous,
                                 self.disable_tensor_cache, self.dry_run)
        graph_model.init_hpu_graph(*args, **kwargs)
        self.model_dict[input_id] = graph_model
        result = self.cache_replay(input_id, *args, **kwargs)
        self.hpugraph_tracing = False
        return result

    def _input_id(self, *args: Any, **kwargs: Any) -> int:
        input_id = GraphModel.full_input_hash(self.forward_params, *args, **kwargs)
        if self.have_grad_accumulation and self.forward_cnt == 0:
            input_id = input_hash((input_id, self.forward_cnt + 1))
        return input_id

    def _uncached(self, *args: Any, **kwargs: Any) -> Any:
        if self.model.training:
            self.uncached_train_hits += 1
        else:
            self.uncached_eval_hits += 1
        return self.model.orig_forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self.iteration_cnt += 1
        input_id = self._input_id(*args, **kwargs)
        if self.verbose and self.iteration_cnt % self.log_frequency == 0:
            self.log_stats()
        if self.model.training and torch.is_grad_enabled() and self.use_lazy_mode:
            if input_id in self.model_dict:
                return self.cache_replay(input_id, *args, **kwargs)
            if len(self.model_dict) < self.max_graphs:
                return self.cache_insert(input_id, *args, **kwargs)
        return self._uncached(*args, **kwargs)

    def forward_lfs(self, *args: Any, **kwargs: Any) -> Any:
        """The least-frequently-used policy: between ``capture_start()`` and
        ``capture_end()`` inputs are counted; then the ``max_graphs`` most frequent are graphed."""
        self.iteration_cnt += 1
        input_id = self._input_id(*args, **kwargs)
        if self.is_capturing:
            self.input_count_dict[input_id] = self.input_count_dict.get(input_id, 0) + 1
        if self.verbose and self.iteration_cnt % self.log_frequency == 0:
            self.log_stats()
        use_cache = (self.model.training and torch.is_grad_enabled() and self.use_lazy_mode
                     and not self.is_capturing)
        if use_cache:
            if input_id in self.model_dict:
                return self.cache_replay(input_id, *args, **kwargs)
            if input_id in self.priority_keys:
                return self.cache_insert(input_id, *args, **kwargs)
        return self._uncached(*args, **kwargs)

    def capture_start(self) -> None:
        self.is_capturing = True

    def capture_end(self) -> None:
        counts = self.input_count_dict
        self.priority_keys = sorted(counts, key=counts.__getitem__, reverse=True)[
            : self.max_graphs]
        self.is_capturing = False
        if self.verbose:
            self.log_stats()
        self.input_count_dict = {}

    def log_stats(self) -> None:
        total = sum(self.cached_hits_dict.values())
        for line in (
            "HPU Graph Statistics",
            "  Configs",
            f"    Max graphs                :- {self.max_graphs}",
            f"    LFU Cache                 :- {self.use_lfu}",
            f"    Async execution config    :- {self.asynchronous}",
            f"    Grad accumulation config  :- {self.have_grad_accumulation}",
            f"    Set iteration calls       :- {self.set_iterations_call_cnt}",
            "  Cache info ",
            f"    No. of HPUGraphs cached   :- {len(self.model_dict)}",
            f"    Priority keys             :- {self.priority_keys}",
            f"    Input hash v. cached hits :- {self.cached_hits_dict}",
            f"    Total cached hits         :- {total}",
            f"    Uncached train hits       :- {self.uncached_train_hits}",
            f"    Uncached eval hits        :- {self.uncached_eval_hits}",
            "    Total forwards executed   :- "
            f"{total + self.uncached_train_hits + self.uncached_eval_hits}",
        ):
            print(line)


def public_names() -> Iterator[tuple[str, Any]]:
    """What ``torch.hpu`` gains in lazy mode (the real package's ``from .graphs import *``)."""
    for name in __all__:
        yield name, globals()[name]
