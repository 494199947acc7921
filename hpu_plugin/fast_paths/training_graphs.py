"""Accelerate (and so the ``Trainer``): a model's repeated blocks trained through graphs that
``hpu_backend`` compiles, for code that never calls ``torch.compile``.

In eager mode every op of a training step is a launch of its own on Gaudi (a tiny Llama's
bf16 ``Trainer`` step: about 230); Intel's documents make ``torch.compile`` the way to
graphs, and users moving from optimum-habana (whose lazy mode made a step a few graphs) do
not set it. When Accelerate prepares a model for training on ``hpu`` (every ``Trainer`` and
every ``accelerator.prepare(model)``), the forward of each repeated block (the decoder layers
of a Transformers model: one ``nn.ModuleList`` of one class) is compiled as Accelerate's
``compile_regions`` does: one compiled forward per block class, shared by every layer, so the
model compiles one forward and one backward graph instead of one per layer. Two small parts
outside the blocks are compiled too, each shared by every model that has it: Transformers'
rotary table (the ``*RotaryEmbedding`` module every layer reads) and the loss function the
model's ``loss_function`` gives (shifting the labels, the float32 cross-entropy and its
scaling, and their backward: a dozen launches become two; the token and sequence losses
only, not the detection losses that match boxes on the host), and the output head (the
model's ``get_output_embeddings()``, where it is a plain ``nn.Linear``: its casts under
autocast and its matmuls, forward and backward, become two graphs), and the RMSNorm after
the last block where it has no fused kernel (Gemma's). The 4-D masks Transformers builds
before the layers (``masking_utils.create_causal_mask`` and its sliding-window twin, which a
modeling module calls by name) are one graph each instead of a dozen launches: from a
batch's attention mask (what tokenizers and data collators give), and without one where the
model numbered the tokens itself (no position ids passed to it), once the builder built a
mask for the model without one (Gemma 2's sliding windows; where it returns none, SDPA
applies ``is_causal`` and the builder stays eager). The builder is then not given the position
ids, since it would read them back to the host to look for packed sequences, which such
numbering never has; position ids the caller gave keep Transformers' own builder and check.

With ``HPU_PLUGIN_TRAIN_GRAPHS_REGION=model``, where the model's class declares that its
forward compiles as one graph (Transformers' ``_can_compile_fullgraph``, which Llama, Qwen,
Mistral, GPT-2 and most decoders set), the region is the whole model instead: its forward
with the loss in one graph and the backward in another, as lazy mode makes a step a few
graphs; the embedding, the final norm, the head and the loss are then no launches of their
own. Its compilation grows with the depth (dynamo traces every layer, the graph compiler
compiles them all), where the blocks' region, the default, compiles one layer however deep
the model: the first step of a model of 80 layers stays a matter of seconds.

Only ``forward`` is compiled, not ``__call__``: module hooks and Transformers' output
recorders run as before around it. Gradient checkpointing (TRL's default) keeps its memory:
Transformers 5 checkpoints inside a layer's forward, so the checkpoint is traced into the
layer's graph and recomputed inside its backward graph (AOT autograd's partitioner, which
the Gaudi bridge's backend uses and tests with ``torch.utils.checkpoint``); Transformers 4
checkpoints around the forward, which then runs compiled inside the checkpoint. The
compiled forward runs while the module is training with gradients on, and for passes over
whole sequences without gradients (no cache given) of a model in training (TRL's old
log-probabilities) or of a reference model (one prepared for evaluation while a model of its
class trains through graphs), so that they round as the pass with gradients does and an
on-policy ratio is exactly 1; evaluation, ``generate()`` and every model not prepared on
``hpu`` run the class's own forward (the checks are a set lookup and the input's device
per call, not per op).
The parts get it as their instance's ``forward``, so that the class's stays Transformers'
own; the model's region gets it on the model's class before Accelerate prepares the model,
since its mixed precision wraps the instance's forward.

Not taken, with the reason kept for ``hpu-plugin info``: in lazy mode (no ``torch.compile``
there), where the user compiled (``torch_compile=True``, Accelerate's dynamo plugin,
``model.compile()``), under DeepSpeed, FSDP 1 or any wrapping but DDP's and FSDP 2's (the
model's region not under FSDP 2 either), with dropout in the blocks (a graph draws other
random numbers than eager mode, so the losses would differ), for a model without repeated
blocks, and with ``HPU_PLUGIN_FAST_TRAIN_GRAPHS=0``. A block whose
compilation fails runs its own forward from then on, with one warning.
"""

from __future__ import annotations

import contextvars
import copy
import functools
import inspect
import logging
import sys
import types
import weakref
from collections.abc import Callable
from typing import Any

from hpu_plugin.fast_paths.decisions import take
from hpu_plugin.fast_paths.fused_training import _lazy
from hpu_plugin.fast_paths.generate_buckets import is_compiled
from hpu_plugin.gaudi import tuning
from hpu_plugin.gaudi.software import DEVICE_TYPE
from hpu_plugin.hosts.replacing import original_of
from hpu_plugin.patching import Patches, is_ours, ours, record_out
from hpu_plugin.registry import Registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

NAME = "training_graphs"
HOST = "accelerate"
ADAPTER = "training graphs"
BACKEND = "hpu_backend"
FSDP = "FSDP"
#: How Accelerate runs a model that trains through graphs: alone, under DDP (which wraps
#: the compiled parts), or under FSDP 2 (which shards each block around its compiled
#: forward, as Accelerate's own regional compilation for FSDP 2 does).
PLAIN = ("NO", "MULTI_HPU", FSDP)

#: The parts (blocks, rotary tables, final norms, heads) or models that train through their
#: class's compiled forward.
_taken: weakref.WeakSet[Any] = weakref.WeakSet()
#: The regions given their graphed forward as Accelerate first prepared each model, held
#: weakly (the model's region is the model itself).
_found: weakref.WeakKeyDictionary[Any, list[weakref.ref[Any]]] = weakref.WeakKeyDictionary()
#: The Transformers models (a model and the models inside it) whose parts run graphs, with
#: their parameter shapes: a reference model is one shaped as a model that trains (a teacher
#: or a reward model of another size is not).
_shapes: weakref.WeakKeyDictionary[Any, tuple[Any, ...]] = weakref.WeakKeyDictionary()
#: Those of them that train through graphs.
_trained: weakref.WeakSet[Any] = weakref.WeakSet()
#: The parts of the models prepared for evaluation beside training (TRL's reference models):
#: they score through the graphs of their class while a model of that class trains.
_frozen: weakref.WeakSet[Any] = weakref.WeakSet()
#: Per class of a part (a block, the rotary table, the final norm, the output head) or of a
#: model (the model's region), its compiled forward: one Dynamo cache for every layer.
_compiled: dict[type, Callable[..., Any]] = {}
#: The models whose loss function runs compiled (the blocks' region leaves it outside).
_losses: weakref.WeakSet[Any] = weakref.WeakSet()
#: Per loss function (Transformers' ``LOSS_MAPPING`` entries), its compiled form; ``None``
#: once its compilation failed.
_compiled_losses: dict[Callable[..., Any], Callable[..., Any] | None] = {}
#: The losses of Transformers' ``LOSS_MAPPING`` that are compiled: tensor arithmetic only.
#: The detection and segmentation losses match boxes on the host (SciPy's assignment) and
#: branch on the labels' Python structure, so compiled they would compile again and again.
COMPILED_LOSSES = frozenset({"ForCausalLMLoss", "ForMaskedLMLoss", "ForSequenceClassificationLoss",
                             "ForTokenClassification", "ForQuestionAnsweringLoss"})
#: Transformers' mask builders (4.53 and later) that a modeling module calls by name.
MASK_BUILDERS = ("create_causal_mask", "create_sliding_window_causal_mask")
#: The configs of the models whose masks are built by a graph (a builder is given the
#: config, not the model): by id, held weakly, since a config compares by value.
_mask_configs: dict[int, weakref.ref[Any]] = {}
#: Whether the innermost Transformers model running now was called without position ids,
#: so that it numbers the tokens itself (0, 1, 2, ... after the cache's length).
_own_positions: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "hpu_plugin_own_positions", default=False)
#: Whether the innermost Transformers model running now scores whole sequences with
#: gradients off and no cache given, in training (TRL's old log-probabilities) or as a
#: reference model: it runs the graphs too, so that it rounds as the pass with gradients does.
_scoring: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "hpu_plugin_scoring", default=False)
#: The names a Transformers model's forward takes its cache by (5.24 and later: ``cache``).
CACHE_ARGUMENTS = ("past_key_values", "cache")


#: The most shapes one parameter may have among the blocks of a class that share a graph.
MOST_WIDTHS = 2


def repeated_blocks(model: Any) -> list[Any]:
    """The ``nn.ModuleList``s of two or more modules of one class, outermost first (the
    decoder layers, not the experts inside them): Accelerate's rule for regions, with one
    more condition. Among all the modules of the class, no parameter has more than
    :data:`MOST_WIDTHS` shapes. Two widths (CLIP's text and vision towers, Gemma 4's sliding
    and full attention layers) cost the class's compiled forward one more compilation; a
    hierarchy of stages, each wider than the last (Swin's, ConvNeXt's, a UNet's levels),
    one for every stage, traced with dynamic shapes (minutes of a first step) or past
    Dynamo's recompile limit, so such a class runs eagerly."""
    import torch

    found: list[Any] = []

    def walk(module: Any) -> None:
        for child in module.children():
            if (isinstance(child, torch.nn.ModuleList) and len(child) > 1
                    and all(type(m) is type(child[0]) for m in child)
                    and _widths(list(child)) <= MOST_WIDTHS):
                found.append(child)
            else:
                walk(child)

    walk(model)
    by_class: dict[type, list[Any]] = {}
    for blocks in found:
        by_class.setdefault(type(blocks[0]), []).extend(blocks)
    return [blocks for blocks in found if _widths(by_class[type(blocks[0])]) <= MOST_WIDTHS]


def _widths(modules: list[Any]) -> int:
    """The most shapes one parameter name has among ``modules``."""
    shapes: dict[str, set[tuple[int, ...]]] = {}
    for module in modules:
        for name, parameter in module.named_parameters():
            shapes.setdefault(name, set()).add(tuple(parameter.shape))
    return max((len(seen) for seen in shapes.values()), default=1)


def whole_model(model: Any) -> bool:
    """Is the region the model itself (its class declares a forward that compiles as one
    graph, and the setting asks for the model's region)?"""
    return tuning.train_graphs_region() == "model" and bool(
        getattr(type(model), "_can_compile_fullgraph", False))


def _outside(model: Any, blocks: list[Any], suffix: str) -> list[Any]:
    """Transformers' modules outside the blocks whose class name ends with ``suffix``."""
    inside = {id(m) for block in blocks for m in block.modules()}
    return [module for module in model.modules()
            if id(module) not in inside and type(module).__name__.endswith(suffix)
            and type(module).__module__.startswith("transformers.")]


def rotary_tables(model: Any, blocks: list[Any]) -> list[Any]:
    """Transformers' rotary embedding modules outside the blocks (``*RotaryEmbedding``, no
    parameters): the cosine and sine tables every layer reads, a handful of ops each step."""
    return [module for module in _outside(model, blocks, "RotaryEmbedding")
            if next(iter(module.parameters()), None) is None]


def final_norms(model: Any, blocks: list[Any]) -> list[Any]:
    """Transformers' RMSNorm layers outside the blocks (the norm after the last layer) that
    run their class's own forward: a handful of ops each way, where the fused kernel (the
    layer's own bound forward) is already one."""
    return [module for module in _outside(model, blocks, "RMSNorm")
            if "forward" not in vars(module)]


def output_head(model: Any, blocks: list[Any]) -> Any | None:
    """The model's output head, when it is a plain ``nn.Linear`` outside the blocks with no
    ``forward`` of its own (a LoRA or quantized layer, or the user's forward, stays as it is)."""
    import torch

    getter = getattr(model, "get_output_embeddings", None)
    try:
        head = getter() if callable(getter) else None
    except Exception:  # a model whose getter is not implemented
        return None
    inside = {id(m) for block in blocks for m in block.modules()}
    if type(head) is torch.nn.Linear and id(head) not in inside and "forward" not in vars(head):
        return head
    return None


def regions(model: Any) -> list[Any]:
    """What is compiled: the model itself (:func:`whole_model`), else its repeated blocks,
    the rotary tables they read and the norm after them."""
    if whole_model(model):
        return [model]
    blocks = [module for found in repeated_blocks(model) for module in found]
    if not blocks:
        return []
    return blocks + rotary_tables(model, blocks) + final_norms(model, blocks)


def _user_compiled(accelerator: Any, model: Any) -> bool:
    plugin = getattr(getattr(accelerator, "state", None), "dynamo_plugin", None)
    backend = getattr(plugin, "backend", None)
    chosen = str(getattr(backend, "value", backend) or "NO").upper() != "NO"
    return chosen or is_compiled(model) or any(
        is_compiled(m) for m in model.modules() if m is not model)


def _on_hpu(model: Any) -> bool:
    first = next(iter(model.parameters()), None)
    return first is not None and first.device.type == DEVICE_TYPE


def _dropout(model: Any, compiled: list[Any]) -> str | None:
    """The dropout a compiled region would apply in training, if any: a ``Dropout`` module
    with ``p > 0``, stochastic depth (Transformers' ``*DropPath`` modules, ``drop_prob > 0``),
    or a nonzero ``*dropout*`` / ``*pdrop*`` / ``*drop_path*`` value of the model's config
    (the attention's functional dropout, the depth's drop rate)."""
    import torch

    for region in compiled:
        for module in region.modules():
            if isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p > 0:
                return f"{type(module).__name__}(p={module.p})"
            drop = getattr(module, "drop_prob", None)
            if type(module).__name__.endswith("DropPath") and _positive(drop):
                return f"{type(module).__name__}(drop_prob={float(drop):g})"
    config = getattr(model, "config", None)
    for name, value in sorted(vars(config).items() if config is not None else ()):
        if any(word in name for word in ("dropout", "pdrop", "drop_path")) and _positive(value):
            return f"config.{name}={value}"
    return None


def _positive(value: Any) -> bool:
    """A probability above 0: a number (not a flag) or a tensor of one."""
    if hasattr(value, "numel") and value.numel() == 1:
        value = value.item()
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def why_not(registry: Registry, accelerator: Any, model: Any) -> str | None:
    """Why ``model``, prepared for training by ``accelerator``, is not trained through
    graphs; None when it is to be."""
    kind = str(getattr(accelerator.distributed_type, "value", accelerator.distributed_type))
    if kind == FSDP and not getattr(accelerator, "is_fsdp2", False):
        return ("FSDP 1 wraps the model in flat parameters of its own (FSDP 2, "
                "fsdp_version=2, trains through graphs)")
    if kind not in PLAIN:
        return f"{kind} wraps the model its own way"
    if kind == FSDP and whole_model(model):
        return ("FSDP 2 gathers each block's parameters around the block's own forward, "
                "which one graph of the whole model would hide; unset "
                "HPU_PLUGIN_TRAIN_GRAPHS_REGION for the per-block graphs")
    if _lazy():
        return "lazy mode (PT_HPU_LAZY_MODE=1) makes graphs of its own; torch.compile is not used"
    if _user_compiled(accelerator, model):
        return "the model is compiled by the user's choice"
    if str(getattr(accelerator, "mixed_precision", "no")) == "fp16":
        # Gaudi's autocast runs mul in the lower precision; traced into the backward graph,
        # an RMSNorm's float32 arithmetic overflows float16 and every step is skipped
        return ("fp16 autocast: the compiled backward overflows float16 where eager's does "
                "not (bf16, Gaudi's precision, trains through graphs)")
    blocks = repeated_blocks(model)
    if not blocks:
        return f"{type(model).__name__} has no repeated blocks of at most two widths"
    dropout = _dropout(model, regions(model))
    if dropout is not None:
        return f"{dropout} is on: a graph draws other random numbers than eager mode"
    classes = sorted({type(module).__name__ for module in regions(model)})
    if not take(registry, NAME, {"model": type(model).__name__, "blocks": classes}):
        return "turned off (HPU_PLUGIN_FAST_TRAIN_GRAPHS, HPU_PLUGIN_FAST or a plugin's hook)"
    return None


def wanted(registry: Registry, accelerator: Any, model: Any) -> bool:
    """Whether preparing ``model`` on ``hpu`` will train it through graphs (the
    ``Trainer``'s shape buckets ask this before Accelerate prepares the model)."""
    return (accelerator is not None and _on_hpu(model)
            and why_not(registry, accelerator, model) is None)


def _headed_for_hpu(accelerator: Any, model: Any) -> bool:
    """On ``hpu`` already, or Accelerate will place it there."""
    device = getattr(accelerator, "device", None)
    return _on_hpu(model) or (getattr(device, "type", None) == DEVICE_TYPE and getattr(
        accelerator, "device_placement", True))


@functools.cache
def _compile_failures() -> tuple[type[BaseException], ...]:
    import torch._dynamo.exc as dynamo_exc

    return tuple(error for name in ("BackendCompilerFailed", "Unsupported",
                                    "InternalTorchDynamoError", "TorchRuntimeError")
                 if isinstance(error := getattr(dynamo_exc, name, None), type))


def _compiled_or_eager(compiled: Callable[..., Any], eager: Callable[..., Any], what: str,
                       turn_off: Callable[[], None], *args: Any, **kwargs: Any) -> Any:
    """``compiled(*args, **kwargs)``; where it fails to compile, ``turn_off`` (so the eager
    form runs from then on), one warning naming ``what``, and ``eager``'s result: a fast
    path never stops the user's training."""
    try:
        return compiled(*args, **kwargs)
    except _compile_failures() as exc:
        turn_off()
        say_once(f"training-graph-failed:{what}", logging.WARNING,
                 "hpu_plugin: the compiled %s failed, so it runs eagerly from now on: %s",
                 what, exc)
    return eager(*args, **kwargs)


def _training_in_graphs(module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Does ``module`` run its compiled forward for this call (``args``, ``kwargs``): taken
    and training with gradients on, or scoring whole sequences without them
    (:data:`_scoring`), given its input on ``hpu`` (a model moved to the CPU after training
    runs as Transformers wrote it), and not inside a trace (where Dynamo inlines the class's
    own forward)?"""
    import torch

    if torch.compiler.is_compiling():
        return False
    if _scoring.get():
        taken = module in _taken or module in _frozen
    else:
        taken = module.training and module in _taken and torch.is_grad_enabled()
    if not taken:
        return False
    first = args[0] if args else next(iter(kwargs.values()), None)
    if isinstance(first, torch.Tensor):  # the input's device: no walk over the parameters
        return first.device.type == DEVICE_TYPE
    return _on_hpu(module)


def _eager_from_now(module: Any) -> None:
    """``module``'s own forward from now on, for every pass: its compilation failed, or its
    model no longer fits the graphs."""
    _taken.discard(module)
    _frozen.discard(module)


def _reference(model: Any) -> bool:
    """Is ``model`` a reference for a model that trains through graphs: of its class and its
    parameter shapes (TRL's reference models are prepared for evaluation before the policy
    is; a model evaluated before it trains is no reference for itself)?"""
    shapes = _shapes.get(model)
    return shapes is not None and model not in _trained and any(
        type(trained) is type(model) and _shapes.get(trained) == shapes
        for trained in list(_trained))


def _given(name: str, parameters: list[str], args: tuple[Any, ...],
           kwargs: dict[str, Any]) -> Any:
    """The argument ``name`` of a forward call (``parameters``: its names, ``self`` first)."""
    at = parameters.index(name) if name in parameters else None
    return args[at - 1] if at is not None and len(args) >= at else kwargs.get(name)


def _scoring_call(model: Any, parameters: list[str], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Is this call of ``model``'s forward a pass with gradients off over whole sequences (no
    cache given, so not a step of ``generate()``), of a model in training or of a reference
    model; and its keyword arguments. A cache made inside the graphs would specialise them
    to each layer, so a pass that makes one keeps the class's forward: the ``Trainer``
    trains with ``use_cache`` off; TRL's reference models leave it on and never read the
    cache, so a reference model's pass keeps none unless the caller asks for one."""
    import torch

    if torch.is_grad_enabled() or model not in _shapes or any(
            _given(name, parameters, args, kwargs) is not None for name in CACHE_ARGUMENTS):
        return False, kwargs
    reference = not model.training
    if not (_reference(model) if reference else model in _trained):
        return False, kwargs
    use = _given("use_cache", parameters, args, kwargs)
    if (reference and use is None and "use_cache" in parameters
            and parameters.index("use_cache") > len(args)):
        return True, {**kwargs, "use_cache": False}  # the config's: no cache for the call
    if use is None:
        use = getattr(getattr(model, "config", None), "use_cache", False)
    return not use, kwargs


def _graphed_forward(patches: Patches, cls: type) -> None:
    """Give the model class ``cls`` a forward that runs the compiled one for the models in
    :data:`_taken` while they train with gradients on (through ``patches``: undoing restores
    it). The model's region only: its class, since Accelerate's mixed precision wraps the
    instance's forward as it prepares the model."""
    import torch

    original = vars(cls)["forward"] if "forward" in vars(cls) else cls.forward
    compiled = torch.compile(original, backend=BACKEND)
    _compiled[cls] = compiled
    what = f"forward of {cls.__qualname__}"
    parameters = list(inspect.signature(original).parameters)

    @functools.wraps(original)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return original(self, *args, **kwargs)
        scoring, kwargs = (_scoring_call(self, parameters, args, kwargs)
                           if self in _taken or self in _frozen else (False, kwargs))
        token = _scoring.set(scoring)
        try:
            if _training_in_graphs(self, args, kwargs):
                return _compiled_or_eager(compiled, original, what,
                                          functools.partial(_eager_from_now, self),
                                          self, *args, **kwargs)
            return original(self, *args, **kwargs)
        finally:
            _scoring.reset(token)

    def undo() -> None:
        _compiled.pop(cls, None)

    patches.set(cls, "forward", ours(forward))
    patches.on_undo(undo, f"{cls.__qualname__} compiled forward")


class _GraphedPart:
    """A part's instance ``forward`` (a block, the rotary table, the final norm, the output
    head): the compiled forward of its class, shared by every module of that class, while
    the model trains through graphs; the class's own otherwise.

    Set on the instance, so that the class's forward stays as Transformers made it: 5.x
    wraps a layer's forward in its gradient checkpointing, which checkpoints only where it is
    the class's forward. The checkpoint is then traced into the graph, and ``hpu_backend``
    (AOT autograd's partitioner) recomputes the layer inside the backward graph, keeping the
    memory checkpointing saves. A model saved whole (pickle, ``torch.save(model)``) saves
    this as the class's ``forward`` given the module, so it loads and runs where hpu-plugin is
    not installed; a deep copy is bound to the copy's module."""

    __slots__ = ("__self__",)
    __hpu_plugin__ = True

    def __init__(self, module: Any) -> None:
        self.__self__ = module

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import torch

        module = self.__self__
        cls = type(module)
        if _training_in_graphs(module, args, kwargs):
            if cls not in _compiled:
                _compiled[cls] = torch.compile(cls.forward, backend=BACKEND)
            return _compiled_or_eager(_compiled[cls], cls.forward,
                                      f"forward of {cls.__qualname__}",
                                      functools.partial(_eager_from_now, module),
                                      module, *args, **kwargs)
        return cls.forward(module, *args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        """The class's forward's, bound: code that reads a module's parameters reads them."""
        return inspect.signature(types.MethodType(type(self.__self__).forward, self.__self__))

    def __reduce__(self) -> tuple[Any, ...]:
        return (functools.partial, (type(self.__self__).forward, self.__self__))

    def __deepcopy__(self, memo: dict[int, Any]) -> _GraphedPart:
        return _GraphedPart(copy.deepcopy(self.__self__, memo))


class _GraphedLoss(property):
    """A model class's ``loss_function`` that gives the compiled loss while the model trains
    through graphs (a property: Transformers chooses the loss per model)."""

    __hpu_plugin__ = True


def _compiled_loss(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` compiled, shared by every model that uses it; ``function`` itself once
    its compilation failed (said once)."""
    import torch

    if function not in _compiled_losses:
        _compiled_losses[function] = torch.compile(function, backend=BACKEND)
    compiled = _compiled_losses[function]
    if compiled is None:
        return function
    turn_off = functools.partial(_compiled_losses.__setitem__, function, None)

    @functools.wraps(function)
    def loss(*args: Any, **kwargs: Any) -> Any:
        return _compiled_or_eager(compiled, function, function.__qualname__, turn_off,
                                  *args, **kwargs)

    return loss


def _compilable(function: Any) -> bool:
    """One of Transformers' losses that compile (:data:`COMPILED_LOSSES`)?"""
    return (getattr(function, "__module__", None) == "transformers.loss.loss_utils"
            and getattr(function, "__name__", None) in COMPILED_LOSSES)


def _graphed_loss(patches: Patches, cls: type) -> None:
    """Give ``cls`` a ``loss_function`` that is compiled for the models in :data:`_losses`
    while they train with gradients on. A class without Transformers' ``loss_function``
    property computes its loss in its forward: nothing to do."""
    import torch

    original = inspect.getattr_static(cls, "loss_function", None)
    if (not isinstance(original, property) or isinstance(original, _GraphedLoss)
            or original.fget is None):  # none, or a base class's already serves
        return
    read = original.fget

    def loss_function(self: Any) -> Any:
        function = read(self)
        if (self in _losses and self.training and torch.is_grad_enabled()
                and not torch.compiler.is_compiling() and _compilable(function)
                and _on_hpu(self)):
            return _compiled_loss(function)
        return function

    patches.set(cls, "loss_function", _GraphedLoss(loss_function, original.fset,
                                                   original.fdel, original.__doc__))


def _graphed_mask(builder: Callable[..., Any]) -> Callable[..., Any]:
    """``builder`` run compiled for a padding mask on ``hpu`` of a model in
    :data:`_mask_configs` while gradients are on; itself for every other call, and for every
    call once its compilation failed (said once)."""
    import torch

    compiled: list[Any] = [torch.compile(builder, backend=BACKEND)]
    parameters = list(inspect.signature(builder).parameters)
    at = parameters.index("position_ids") if "position_ids" in parameters else None
    embeds = next((name for name in ("inputs_embeds", "input_embeds") if name in parameters),
                  None)
    embeds_at = parameters.index(embeds) if embeds is not None else 0
    #: The configs (by id, held weakly) whose models built a mask without an attention mask:
    #: where the builder returns none (SDPA's ``is_causal``), it stays eager, since compiled
    #: it builds the full mask on Transformers 4, and on 5 with torch 2.11 (torch 2.13 skips).
    unmasked: dict[int, weakref.ref[Any]] = {}

    @functools.wraps(builder)
    def build(*args: Any, **kwargs: Any) -> Any:
        config = kwargs.get("config", args[0] if args else None)
        mask = kwargs.get("attention_mask", args[2] if len(args) > 2 else None)
        held = _mask_configs.get(id(config))
        if (held is None or held() is not config or not torch.is_grad_enabled()
                or torch.compiler.is_compiling()):
            return builder(*args, **kwargs)
        if embeds is not None:  # a model moved off hpu builds its masks as Transformers does
            hidden = args[embeds_at] if len(args) > embeds_at else kwargs.get(embeds)
            if isinstance(hidden, torch.Tensor) and hidden.device.type != DEVICE_TYPE:
                return builder(*args, **kwargs)
        if mask is None and at is not None and _own_positions.get():
            # Without a mask Transformers reads the position ids back to the host to look
            # for packed sequences; the model's own numbering has none, so that wait (and
            # its launches) is skipped. Position ids the caller gave are still checked.
            if len(args) > at:
                args = (*args[:at], None, *args[at + 1:])
            else:
                kwargs["position_ids"] = None
            known = unmasked.get(id(config))
            if known is None or known() is not config:
                built = builder(*args, **kwargs)
                if built is not None:  # a mask all the same: a graph from the next call on
                    unmasked[id(config)] = weakref.ref(config)
                return built
        elif not (isinstance(mask, torch.Tensor) and mask.device.type == DEVICE_TYPE):
            return builder(*args, **kwargs)
        if compiled[0] is None:
            return builder(*args, **kwargs)
        return _compiled_or_eager(compiled[0], builder, builder.__qualname__,
                                  functools.partial(compiled.__setitem__, 0, None),
                                  *args, **kwargs)

    return ours(build)


def _graphed_masks(patches: Patches, model: Any) -> bool:
    """Give the modeling modules of ``model``'s classes the graphed mask builders, where
    they call Transformers' own by name; whether ``model`` builds its masks through them."""
    modules = {sys.modules.get(type(module).__module__) for module in model.modules()}
    found = False
    for module in modules - {None}:
        for name in MASK_BUILDERS:
            builder = vars(module).get(name)
            if (callable(builder) and not is_ours(builder)
                    and getattr(builder, "__module__", None) == "transformers.masking_utils"):
                patches.set(module, name, _graphed_mask(builder))
            found = found or is_ours(vars(module).get(name))
    return found


def _noting_forward(patches: Patches, cls: type) -> None:
    """Give the Transformers model class ``cls`` a forward that notes whether this call
    scores whole sequences without gradients (:data:`_scoring`) and, for the mask builder,
    whether it numbers its tokens itself (no position ids given)."""
    import torch

    original = vars(cls)["forward"] if "forward" in vars(cls) else cls.forward
    parameters = list(inspect.signature(original).parameters)

    @functools.wraps(original)
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return original(self, *args, **kwargs)
        # set in evaluation too: a frozen inner model must not inherit the outer one's answer
        given = (_given("position_ids", parameters, args, kwargs)
                 if "position_ids" in parameters else True)
        own = _own_positions.set(given is None)
        if _cache_unasked(self, parameters, args, kwargs):
            kwargs = {**kwargs, "use_cache": False}
            say_once(("training-no-cache", cls.__qualname__), logging.INFO,
                     "hpu_plugin: %s trains through graphs without a key-value cache (its "
                     "config's use_cache=True, which no caller asked for): pass use_cache=True "
                     "to a forward that needs one", cls.__qualname__)
        scores, kwargs = _scoring_call(self, parameters, args, kwargs)
        scoring = _scoring.set(scores)
        try:
            return original(self, *args, **kwargs)
        finally:
            _scoring.reset(scoring)
            _own_positions.reset(own)

    patches.set(cls, "forward", ours(forward))


def _cache_unasked(model: Any, parameters: list[str], args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> bool:
    """Is this a training pass with gradients, through graphs, whose caller asked for no
    cache (neither ``use_cache=True`` nor a cache)? Its model would still build one where its
    config says ``use_cache=True``: a causal LM's default, and a language model's inside
    LLaVA or Qwen2-VL, whose own config the ``Trainer`` does not turn off. The blocks write
    that cache by layer index, so each layer would compile a graph of its own. Such a pass
    builds none, as Transformers' gradient checkpointing decides too."""
    import torch

    return (model in _trained and model.training and torch.is_grad_enabled()
            and getattr(getattr(model, "config", None), "use_cache", False) is True
            and "use_cache" in parameters and parameters.index("use_cache") > len(args)
            and kwargs.get("use_cache") is None
            and all(_given(name, parameters, args, kwargs) is None for name in CACHE_ARGUMENTS))


def graph_regions(registry: Registry, patches: Patches, accelerator: Any,
                  model: Any, training: bool = True) -> list[Any]:
    """Give the classes of ``model``'s regions their graphed forward where :func:`why_not`
    agrees (before Accelerate prepares it) and return the regions, to be taken once the
    model is on ``hpu``; else keep the reason for ``hpu-plugin info`` (when it is prepared
    for ``training``)."""
    if not _headed_for_hpu(accelerator, model):
        return []
    why = why_not(registry, accelerator, model)
    if why is not None:
        if training:
            record_out(HOST, ADAPTER, f"not taken for {type(model).__name__}: {why}")
        log.debug("hpu_plugin: training graphs not taken for %s: %s", type(model).__name__, why)
        return []
    found = regions(model)
    if whole_model(model):
        for cls in {type(module) for module in found}:
            if not is_ours(vars(cls).get("forward")):
                _graphed_forward(patches, cls)
        return found
    head = output_head(model, found)
    found = [module for module in found if "forward" not in vars(module)]  # yours stays
    for module in [*found, head] if head is not None else found:
        patches.set_on_instance(module, "forward", _GraphedPart(module))
    for cls in {type(module) for module in model.modules()}:  # the model's, or PEFT's
        if not is_ours(vars(cls).get("loss_function")):
            _graphed_loss(patches, cls)
    _graphed_masks(patches, model)
    for cls in {type(module) for module in _transformers_models(model)}:
        if not is_ours(vars(cls).get("forward")):
            _noting_forward(patches, cls)
    return [*found, head] if head is not None else found


def graphed(model: Any) -> bool:
    """Whether ``model`` (or a part of it) trains through graphs."""
    return any(module in _taken for module in model.modules())


def _transformers_models(model: Any) -> list[Any]:
    """``model`` and the Transformers models inside it (a causal LM's base model)."""
    return [module for module in model.modules() if hasattr(type(module), "base_model_prefix")]


def _note_models(model: Any) -> None:
    """``model``'s Transformers models run graphs; their shapes are kept."""
    for inner in _transformers_models(model):
        _shapes[inner] = tuple(tuple(p.shape) for p in inner.parameters())


def take_regions(model: Any, found: list[Any]) -> None:
    """The regions train through their graphs from now on, if Accelerate put ``model`` on
    ``hpu``."""
    if found and _on_hpu(model):
        _taken.update(found)
        _trained.update(_transformers_models(model))
        _note_models(model)
        if not whole_model(model):
            _losses.update(module for module in model.modules() if isinstance(
                inspect.getattr_static(type(module), "loss_function", None), _GraphedLoss))
            for module in model.modules():
                config = getattr(module, "config", None)
                if config is not None:
                    _mask_configs[id(config)] = weakref.ref(config)


def _remember_regions(registry: Registry, patches: Patches, accelerator: Any, model: Any,
                      training: bool) -> None:
    """:func:`graph_regions` of ``model``, kept in :data:`_found` (none where it failed: a
    fast path never stops training). Nothing is kept for a model prepared away from ``hpu``:
    moved there and prepared again, it is looked at then."""
    if not _headed_for_hpu(accelerator, model):
        return
    try:
        found = graph_regions(registry, patches, accelerator, model, training)
    except Exception as exc:
        say_once("training-graphs-failed", logging.WARNING,
                 "hpu_plugin: training graphs are off: %r", exc)
        found = []
    _found[model] = [weakref.ref(region) for region in found]


def _prepared_again(registry: Registry, patches: Patches, accelerator: Any, model: Any,
                    found: list[Any], training: bool) -> None:
    """A model prepared before, here (``found``: a Trainer that evaluated first) or where
    Accelerate reports it as prepared: PEFT's wrapper of a model that trained, a model given
    an adapter in place, a deep copy of a prepared model (an EMA copy, a reference model
    copied from the policy), a model prepared on the CPU first. It may have changed since:
    its graphed parts train (or score) through the graphs where :func:`why_not` still
    agrees, and leave them where it does not (an adapter's dropout). A model without any
    gets its parts now, once on ``hpu`` (Accelerate does not wrap a prepared model's
    forward again, so the model's own region, a class forward, is not given then)."""
    parts = found or [module for module in model.modules() if module in _taken
                      or module in _frozen or isinstance(vars(module).get("forward"), _GraphedPart)
                      or (type(module) in _compiled and whole_model(module))]
    if not parts:
        if training and model not in _found and _on_hpu(model) and not whole_model(model):
            _remember_regions(registry, patches, accelerator, model, training)
            take_regions(model, _remembered(model))
        return
    why = why_not(registry, accelerator, model)
    if why is not None:
        _leave(model, parts)
        if training:
            record_out(HOST, ADAPTER, f"not taken for {type(model).__name__}: {why}")
    elif training:
        take_regions(model, parts)
    elif _on_hpu(model):
        _frozen.update(parts)
        _note_models(model)


def _leave(model: Any, parts: list[Any]) -> None:
    """``model`` no longer fits the graphs: its parts, loss and masks run eagerly."""
    for part in parts:
        _eager_from_now(part)
    for module in model.modules():
        _losses.discard(module)
        _trained.discard(module)
        config = getattr(module, "config", None)
        if config is not None:
            _mask_configs.pop(id(config), None)


def _remembered(model: Any) -> list[Any]:
    return [region for ref in _found.get(model, []) if (region := ref()) is not None]


def install_prepare(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    cls = getattr(module, "Accelerator", None)
    original = original_of(cls, "prepare_model", HOST, ADAPTER, "Accelerator.prepare_model",
                           own=True)
    if original is None:
        return

    @functools.wraps(original)
    def prepare_model(self: Any, model: Any, *args: Any, **kwargs: Any) -> Any:
        evaluation = kwargs.get("evaluation_mode", args[1] if len(args) > 1 else False)
        fresh = model not in _found and not getattr(model, "_is_accelerate_prepared", False)
        if fresh:
            # before Accelerate wraps the forward the class has (mixed precision); for
            # evaluation too, since a model first prepared for evaluation (a reference
            # model; a Trainer evaluating before it trains) is not prepared again
            _remember_regions(registry, patches, self, model, not evaluation)
        prepared = original(self, model, *args, **kwargs)
        found = _remembered(model)
        if not fresh:
            _prepared_again(registry, patches, self, model, found, not evaluation)
            return prepared
        if not evaluation:  # once Accelerate placed the model on its device
            take_regions(model, found)
        elif found and _on_hpu(model):
            _frozen.update(found)
            _note_models(model)
        return prepared

    def forget() -> None:
        _found.clear()
        _taken.clear()
        _trained.clear()
        _shapes.clear()
        _frozen.clear()
        _losses.clear()
        _compiled_losses.clear()
        _mask_configs.clear()
        _compiled.clear()

    patches.set(cls, "prepare_model", ours(prepare_model))
    patches.on_undo(forget, "training graphs' blocks")
    install_fsdp2(registry, patches, cls)


def install_fsdp2(registry: Registry, patches: Patches, cls: type) -> None:
    """FSDP 2 prepares the model in ``Accelerator._prepare_fsdp2``, not ``prepare_model``:
    the regions get their compiled forward before ``fully_shard`` wraps each block (its
    hooks gather the block's parameters around that forward and reduce its gradients as the
    backward graph produces them) and are taken once the model is sharded on ``hpu``.
    Accelerate releases without FSDP 2 leave nothing to do."""
    sharded = vars(cls).get("_prepare_fsdp2")
    if sharded is None or is_ours(sharded):
        return
    import torch

    @functools.wraps(sharded)
    def _prepare_fsdp2(self: Any, *args: Any) -> Any:
        models = [obj for obj in args if isinstance(obj, torch.nn.Module)
                  and not getattr(obj, "_is_accelerate_prepared", False)]
        for model in models:
            _remember_regions(registry, patches, self, model, True)
        prepared = sharded(self, *args)
        for model in models:
            take_regions(model, _remembered(model))
        return prepared

    patches.set(cls, "_prepare_fsdp2", ours(_prepare_fsdp2))


def install(registry: Registry, patches: Patches) -> None:
    """Register the post-import hook of Accelerate's ``Accelerator`` (with a device ready)."""
    from hpu_plugin import importhook

    importhook.when_imported(
        "accelerate.accelerator", lambda module: install_prepare(registry, patches, module))
