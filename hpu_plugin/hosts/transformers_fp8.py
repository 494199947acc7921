"""Transformers: Gaudi fp8 (Intel Neural Compressor) for unchanged ``from_pretrained`` code.

Gaudi users run a model in fp8 with Neural Compressor's measure-then-quantize flow: one run
with ``FP8Config(mode="MEASURE")`` records each module's input and weight maxima and writes
them to ``dump_stats_path``; later runs ``convert`` a fresh model with ``mode="QUANTIZE"``,
which reads them, stores the weights as ``float8_e4m3fn`` and replaces the modules by fp8
ones. That needs four calls in the user's code. Here they happen inside Transformers' own
loading, in two ways:

- a ``quantization_config``: :func:`config_class` (``hpu_plugin.fp8.GaudiFp8Config``) is
  registered under :data:`QUANT_METHOD` with Transformers' quantization registry
  (``register_quantization_config`` / ``register_quantizer``; on a release without them the
  adapter stays out and says so); its quantizer places the model through the
  ``hpu_quantization_device_map`` hook (a plugin can decide, first-generation Gaudi is
  refused there before any weight is read) and, once the weights are loaded, converts
  the model when the measurement exists (loaded on the CPU: the conversion moves each
  weight to the HPU) and prepares it for measuring otherwise (loaded on the HPU);
- ``HPU_PLUGIN_FP8=measure|quantize`` with ``HPU_PLUGIN_FP8_STATS`` for code that passes
  nothing (``pipeline()``, scripts the user does not edit): each ``from_pretrained`` that
  places a model on an HPU gets that config. A ``quantization_config`` the user passed, or
  one the checkpoint carries, is theirs and wins.

A model being measured writes its measurement at :func:`finish_measurement`, or at the
process's exit when nobody called it: a measure run is the user's own program, which does
not know it is being measured.

Transformers 5 and later only: the 4.x quantizer base class and ``get_hf_quantizer`` have
other abstract methods and results (tested on 4.51 and 4.57). There ``GaudiFp8Config``
refuses to be made and ``HPU_PLUGIN_FP8`` is said once not to apply, each naming the fix.
"""

from __future__ import annotations

import atexit
import difflib
import functools
import importlib.util
import inspect
import logging
import os
import threading
import types
from collections.abc import Mapping
from typing import Any

from hpu_plugin.gaudi import tuning
from hpu_plugin.gaudi.config_error import GaudiConfigError
from hpu_plugin.hosts.replacing import original_of, stay_out
from hpu_plugin.patching import Patches, ours
from hpu_plugin.registry import Registry, get_registry
from hpu_plugin.reporting import say_once

log = logging.getLogger("hpu_plugin")

HOST = "transformers"
#: The method name in Transformers' registry and in a saved ``quantization_config``.
QUANT_METHOD = "gaudi_fp8"
#: ``GaudiFp8Config.mode``: ``auto`` quantizes when the measurement exists, measures if not.
MODES = ("auto", "measure", "quantize")
#: ``device_map`` strings with which Accelerate spreads the model over the accelerators.
_SPREADING_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")

_lock = threading.Lock()
#: Models prepared for measuring whose measurement is not written yet. Held strongly: a
#: measure run's model freed before exit (``del pipe``) must still write what it recorded.
_measuring: list[Any] = []
_atexit_registered = False


def _rank_and_world() -> tuple[int, int]:
    """This process's rank and world size as Neural Compressor reads them for its file names
    (``fp8_quant/prepare_quant/prepare_model.py``): the process group's when one has
    started, else ``LOCAL_RANK`` and ``WORLD_SIZE``; -1 for unknown. Read afresh: its own
    functions keep their first answer, which would fix it before the job has started."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    numbers = [os.environ.get(name, "-1").strip() for name in ("LOCAL_RANK", "WORLD_SIZE")]
    rank, world = (int(n) if n.lstrip("-").isdigit() else -1 for n in numbers)
    return rank, world


def measurement_file(dump_stats_path: str, inc_options: Mapping[str, Any] | None = None
                     ) -> str:
    """The file Neural Compressor writes a measurement to and reads it from, in this process:
    ``<dump_stats_path>_hooks_<observer>.npz``, with ``_<rank>_<world>`` before ``.npz`` in a
    job of ranks (unless ``seperate_measure_files`` is off), as its ``Fp8cfg.parse`` names it."""
    options = dict(inc_options or {})
    rank, world = _rank_and_world()
    separate = str(options.get("seperate_measure_files", True)).strip().lower() != "false"
    suffix = f"_{rank}_{world}" if rank >= 0 and separate else ""
    return f"{dump_stats_path}_hooks_{options.get('observer', 'maxabs')}{suffix}.npz"


def measurement_exists(dump_stats_path: str,
                       inc_options: Mapping[str, Any] | None = None) -> bool:
    """Whether this process's measurement (:func:`measurement_file`) is there: in a job of
    ranks each reads its own, and another rank's file, or a scale file Neural Compressor
    wrote beside it, is no measurement for this one."""
    return os.path.isfile(measurement_file(dump_stats_path, inc_options))


#: Neural Compressor's ``scale_method`` names whose scales are fixed values, not computed
#: from a measurement: in ``QUANTIZE`` mode it reads no measurement for them (its documented
#: "unit_scale: always use scale of 1" and "hw_aligned_single_scale").
FIXED_SCALE_METHODS = frozenset({"unit_scale", "hw_aligned_single_scale"})


def needs_measurement(inc_options: Mapping[str, Any]) -> bool:
    """Whether quantizing with ``inc_options`` reads a measurement. A ``scale_method`` given
    as a mapping (a default and per-layer sections, each with ``weight`` and ``activation``)
    needs none when every scale in it is a fixed value, nor does dynamic quantization (the
    activations' scales computed as it runs), as Neural Compressor decides."""
    if str(inc_options.get("dynamic_quantization", False)).strip().upper() == "TRUE":
        return False
    method = inc_options.get("scale_method", "maxabs_hw")
    if isinstance(method, str):
        return method.strip().lower() not in FIXED_SCALE_METHODS
    if not isinstance(method, Mapping) or not isinstance(method.get("default"), Mapping):
        return True  # Neural Compressor refuses it when it parses the config
    sections = [method["default"]]
    for key in ("nodes", "layers", "layer_types"):
        overrides = method.get(key)
        sections += list(overrides.values()) if isinstance(overrides, Mapping) else []
    return not all(
        isinstance(section, Mapping) and all(
            str((section.get(part) or {}).get("scale_value_type", "")).lower() == "fixed_value"
            for part in ("weight", "activation"))
        for section in sections)


def _no_measurement(dump_stats_path: str, variable: str,
                    inc_options: Mapping[str, Any]) -> GaudiConfigError:
    return GaudiConfigError(
        variable, dump_stats_path, "the path prefix a measure run wrote",
        "run the program once with HPU_PLUGIN_FP8=measure (or GaudiFp8Config(mode="
        "'measure')) and the same path, with the same ranks, or use mode='auto', which "
        "measures when nothing is there",
        problem=f"no measurement at {measurement_file(dump_stats_path, inc_options)} to "
        "quantize from",
    )


#: The first Transformers release the adapter is written for.
FIRST_RELEASE = 5


def supported() -> bool:
    """Whether the installed Transformers is one this adapter is written for."""
    from hpu_plugin.hosts.replacing import host_version

    major = host_version(HOST).split(".", 1)[0]
    return major.isdigit() and int(major) >= FIRST_RELEASE


def _needs_newer(what: str) -> str:
    from hpu_plugin.hosts.replacing import host_version

    return (f"{what} needs Transformers {FIRST_RELEASE}.0 or later (installed: "
            f"{host_version(HOST)}); upgrade Transformers (pip install 'transformers>="
            f"{FIRST_RELEASE}')")


@functools.cache
def inc_option_names() -> tuple[frozenset[str], bool]:
    """The options Neural Compressor's ``FP8Config`` names, and whether it takes other
    keywords too (it passes them to its fp8 configuration: ``dynamic_quantization``,
    ``ignore_modules_wo_measures``...). Empty when it cannot be imported (not installed, or a
    device it has no fp8 for, such as first-generation Gaudi): loading then refuses with the
    reason."""
    if importlib.util.find_spec("neural_compressor") is None:
        return frozenset(), False
    try:
        from neural_compressor.torch.quantization import FP8Config
    except Exception:
        return frozenset(), False

    parameters = inspect.signature(FP8Config.__init__).parameters.values()
    return (frozenset(p.name for p in parameters
                      if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
                      and p.name not in ("self", "mode", "dump_stats_path")),
            any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters))


#: Neural Compressor's older names of ``allowlist`` and ``blocklist``, which its fp8
#: configuration still reads (``Fp8cfg.parse``).
OLD_OPTION_NAMES = frozenset({"whitelist", "blacklist"})


def _check_inc_options(options: Mapping[str, Any]) -> None:
    """Refuse a misspelt option name: Neural Compressor would ignore it, or fail after the
    weights load. A name it does not list but takes as a keyword is passed on, said once."""
    accepted, takes_any = inc_option_names()
    unknown = sorted(set(options) - accepted - OLD_OPTION_NAMES) if accepted else []
    typos = [(name, close[0]) for name in unknown
             if (close := difflib.get_close_matches(name, accepted, n=1, cutoff=0.8))]
    if typos or (unknown and not takes_any):
        name, close = typos[0] if typos else (unknown[0], "")
        raise ValueError(
            f"GaudiFp8Config(inc_options=...): {name!r} is not an option of Neural "
            "Compressor's FP8Config" + (f" (did you mean {close!r}?)" if close else "")
            + f"; its options: {', '.join(sorted(accepted))}")
    if unknown:
        say_once(("fp8-inc-keywords", *unknown), logging.INFO,
                 "hpu_plugin: GaudiFp8Config passes %s to Neural Compressor's FP8Config as "
                 "keywords of its fp8 configuration (FP8Config does not list them).",
                 ", ".join(unknown))


@functools.cache
def config_class() -> type:
    """``GaudiFp8Config``, a Transformers ``QuantizationConfigMixin`` (built on first use, so
    the plugin imports Transformers only when the user does)."""
    from transformers.utils.quantization_config import QuantizationConfigMixin

    class GaudiFp8Config(QuantizationConfigMixin):  # type: ignore[misc]
        """Neural Compressor's fp8 on Gaudi 2 and 3, for ``from_pretrained``.

        ``dump_stats_path`` is Neural Compressor's path prefix of the measurement
        (``./fp8/measure``). ``mode``: ``"measure"`` prepares the loaded model to record it
        (the user's own runs are the calibration; :func:`hpu_plugin.fp8.finish_measurement`
        or the process's exit writes it), ``"quantize"`` converts the loaded model to fp8 from
        it (refused before loading when it is missing), ``"auto"`` quantizes when it exists
        and measures otherwise. ``inc_options`` go to Neural Compressor's ``FP8Config`` as
        they are (``blocklist``, ``scale_method``...); a ``scale_method`` of fixed scales
        (``"unit_scale"``) quantizes without a measurement, in ``"quantize"`` and ``"auto"``.
        """

        def __init__(self, dump_stats_path: str, mode: str = "auto",
                     inc_options: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
            if not supported():
                from hpu_plugin.hosts.replacing import host_version

                raise GaudiConfigError(
                    "transformers", host_version(HOST), f"Transformers {FIRST_RELEASE}.0 or "
                    "later", f"pip install 'transformers>={FIRST_RELEASE}'",
                    f"GaudiFp8Config needs Transformers {FIRST_RELEASE}.0 or later")
            self.quant_method = QUANT_METHOD
            self.dump_stats_path = os.fspath(dump_stats_path)
            self.mode = str(mode).lower()
            self.inc_options = dict(inc_options or {})
            self.post_init()

        def post_init(self) -> None:
            """Refuse what Neural Compressor would refuse later, after the weights load."""
            if self.mode not in MODES:
                raise ValueError(f"GaudiFp8Config(mode={self.mode!r}): accepted modes are "
                                 f"{', '.join(MODES)}")
            if not self.dump_stats_path.strip():
                raise ValueError("GaudiFp8Config needs dump_stats_path, the path prefix of "
                                 "the measurement (e.g. './fp8/measure')")
            for reserved in ("mode", "dump_stats_path"):
                if reserved in self.inc_options:
                    raise ValueError(f"GaudiFp8Config: pass {reserved} as its own argument, "
                                     "not in inc_options")
            _check_inc_options(self.inc_options)

        def resolved_mode(self) -> str:
            """``measure`` or ``quantize``: what loading does with this config now."""
            if self.mode != "auto":
                return self.mode
            return "quantize" if (
                not needs_measurement(self.inc_options)
                or measurement_exists(self.dump_stats_path, self.inc_options)) else "measure"

    # named where users import it, so that pickle and reprs find it there
    GaudiFp8Config.__module__ = "hpu_plugin.fp8"
    GaudiFp8Config.__qualname__ = "GaudiFp8Config"
    return GaudiFp8Config


@functools.cache
def quantizer_class() -> type:
    """The ``HfQuantizer`` of :data:`QUANT_METHOD`: checks before loading, places through the
    hook, runs Neural Compressor after loading."""
    from transformers.quantizers.base import HfQuantizer

    class GaudiFp8HfQuantizer(HfQuantizer):  # type: ignore[misc]
        """Transformers calls it around ``from_pretrained``; see the module docstring."""

        requires_calibration = False
        #: The registry of the installation that registered the class: it places the model.
        registry: Registry | None = None

        def validate_environment(self, *args: Any, **kwargs: Any) -> None:
            if importlib.util.find_spec("neural_compressor") is None:
                raise ImportError("GaudiFp8Config runs Intel Neural Compressor, which is not "
                                  "installed: pip install 'neural-compressor[pt]'")
            config = self.quantization_config
            if (config.mode == "quantize" and needs_measurement(config.inc_options)
                    and not measurement_exists(config.dump_stats_path, config.inc_options)):
                raise _no_measurement(config.dump_stats_path,
                                      f"dump_stats_path ({tuning.FP8_STATS})",
                                      config.inc_options)

        def update_device_map(self, device_map: Any) -> Any:
            registry = type(self).registry or get_registry()
            if not registry.device_available():
                return device_map
            if device_map is not None and not _all_on_hpu(device_map):
                # Neural Compressor's prepare and convert move the whole model to the Gaudi:
                # weights placed elsewhere would be moved against the user's device_map
                raise GaudiConfigError(
                    "device_map", device_map, "every weight on the Gaudi (Neural Compressor "
                    "measures and converts the whole model there)",
                    "pass device_map='hpu' (or none), or load without GaudiFp8Config",
                    problem=f"{QUANT_METHOD} cannot keep weights off the Gaudi")
            mode = self.quantization_config.resolved_mode()
            chosen = registry.quantization_device_map(
                QUANT_METHOD, 8, device_map, options={"mode": mode})
            if device_map is None and mode == "quantize" and _all_on_hpu(chosen):
                # Neural Compressor's convert takes each weight to the Gaudi as it quantizes
                # it, then the rest of the model: loaded on the CPU, the device never holds
                # the bf16 model, so a model too big for one Gaudi in bf16 loads in fp8 (as
                # optimum-habana loads it). It ends on the current HPU ("hpu"), the one
                # device of a Gaudi process, where the hook's answer places it.
                say_once("fp8-cpu-load", logging.INFO,
                         "hpu_plugin: %s: loading on the CPU; Neural Compressor moves each "
                         "weight to the Gaudi as it converts it to fp8.", QUANT_METHOD)
                return None
            if device_map is None and chosen is not None:
                say_once("fp8-device-map", logging.INFO,
                         "hpu_plugin: %s: no device_map given; placing the model with "
                         "device_map=%r.", QUANT_METHOD, chosen)
                return chosen
            return device_map

        def _process_model_after_weight_loading(self, model: Any, **kwargs: Any) -> Any:
            self.ran_mode = run_neural_compressor(model, self.quantization_config)
            return model

        @property
        def is_compileable(self) -> bool:
            """A converted model compiles: Neural Compressor keeps its static scales as
            module constants for HPU graphs and ``torch.compile``, and the bridge's fp8 ops
            have meta kernels, so ``generate()`` takes Transformers' compiled decoding (and
            the plugin's inference graphs) as for bf16. A measuring model does not: its
            observers record each call in Python, which a graph would replay without."""
            return getattr(self, "ran_mode", None) == "quantize"

        def is_serializable(self, safe_serialization: Any = None) -> bool:
            # Neural Compressor's fp8 modules are not Transformers' to save; its own save()
            # goes through save_pretrained too, so neither saves such a model: the
            # measurement is what is kept, and the model quantized again at load
            return False

        @property
        def is_trainable(self) -> bool:
            return False

    return GaudiFp8HfQuantizer


def run_neural_compressor(model: Any, config: Any) -> str:
    """Convert ``model`` in place from the measurement, or prepare it to record one; return
    which (``"quantize"`` or ``"measure"``)."""
    from neural_compressor.torch.quantization import FP8Config, convert, prepare

    mode = config.resolved_mode()
    # Neural Compressor makes (and checks) the folder of the path: "measure" names none
    path = os.path.abspath(config.dump_stats_path)
    if mode == "quantize":
        convert(model, FP8Config(mode="QUANTIZE", dump_stats_path=path, **config.inc_options))
        method = config.inc_options.get("scale_method", "maxabs_hw")
        source = (f"the measurement at {path}" if needs_measurement(config.inc_options) else
                  f"scales that need no measurement (scale_method={method!r})")
        say_once(("fp8-quantized", path), logging.INFO,
                 "hpu_plugin: %s: converted to fp8 from %s.", type(model).__name__, source)
        return mode
    os.makedirs(os.path.dirname(path), exist_ok=True)
    prepare(model, FP8Config(mode="MEASURE", dump_stats_path=path, **config.inc_options))
    _keep_measuring(model)
    say_once(("fp8-measuring", path), logging.WARNING,
             "hpu_plugin: %s: measuring for fp8 (it still computes in %s); the measurement is "
             "written to %s at hpu_plugin.fp8.finish_measurement(model) or when the program "
             "exits; run again with mode 'quantize' (HPU_PLUGIN_FP8=quantize) to use fp8.",
             type(model).__name__, getattr(model, "dtype", "its dtype"), path)
    return mode


def _keep_measuring(model: Any) -> None:
    global _atexit_registered
    with _lock:
        _measuring.append(model)
        if not _atexit_registered:
            atexit.register(_finish_at_exit)
            _atexit_registered = True


def finish_measurement(model: Any | None = None) -> list[str]:
    """Write the measurement of ``model`` (every model still measuring when None); return
    the ``dump_stats_path`` of each written. A model that is not measuring is refused."""
    from neural_compressor.torch.quantization import finalize_calibration

    with _lock:
        if model is None:
            chosen, _measuring[:] = list(_measuring), []
        elif any(kept is model for kept in _measuring):
            chosen = [model]
            _measuring[:] = [kept for kept in _measuring if kept is not model]
        else:
            raise ValueError(f"{type(model).__name__} is not measuring for fp8: it was not "
                             "loaded with GaudiFp8Config in measure mode, or its measurement "
                             "was written already")
    written = []
    for each in chosen:
        finalize_calibration(each)
        config = getattr(getattr(each, "config", None), "quantization_config", None)
        written.append(getattr(config, "dump_stats_path", "?"))
    return written


def _finish_at_exit() -> None:
    try:
        for path in finish_measurement():
            log.warning("hpu_plugin: fp8 measurement written to %s", path)
    except Exception as exc:  # at exit there is nobody left to catch it
        log.error("hpu_plugin: writing the fp8 measurement failed (%s: %s); no measurement "
                  "was written", type(exc).__name__, exc)


def install_registration(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """``gaudi_fp8`` joins Transformers' quantization registry (``quantizers.auto``)."""
    if not supported():  # said by the config and the switch, where a user asks for fp8
        return
    register_config = getattr(module, "register_quantization_config", None)
    register = getattr(module, "register_quantizer", None)
    configs = getattr(module, "AUTO_QUANTIZATION_CONFIG_MAPPING", None)
    quantizers = getattr(module, "AUTO_QUANTIZER_MAPPING", None)
    if register_config is None or register is None or configs is None or quantizers is None:
        stay_out(HOST, "fp8", "quantizers.auto.register_quantizer (Transformers' registry of "
                 "custom quantization methods)")
        return
    ours_already = configs.get(QUANT_METHOD) is config_class()
    if ours_already:
        return
    if QUANT_METHOD in configs or QUANT_METHOD in quantizers:
        stay_out(HOST, "fp8", f"free quantization method name {QUANT_METHOD!r} (another "
                 "library registered it)")
        return
    quantizer = quantizer_class()
    quantizer.registry = registry
    register_config(QUANT_METHOD)(config_class())
    register(QUANT_METHOD)(quantizer)

    def unregister() -> None:
        configs.pop(QUANT_METHOD, None)
        quantizers.pop(QUANT_METHOD, None)
        quantizer.registry = None

    patches.on_undo(unregister, f"transformers quantization method {QUANT_METHOD!r}")


def _places_on_hpu(device_map: Any) -> bool:
    """Would ``from_pretrained`` with ``device_map`` put weights on an HPU (None: the
    quantizer places it on the current one)?"""
    if device_map is None or (isinstance(device_map, int) and not isinstance(device_map, bool)):
        return True
    if isinstance(device_map, Mapping):
        return any(_places_on_hpu(where) for where in device_map.values()
                   if where is not None)
    text = str(getattr(device_map, "type", device_map))
    return text in _SPREADING_MAPS or text == "hpu" or text.startswith("hpu:")


def _all_on_hpu(device_map: Any) -> bool:
    """Does ``device_map`` put every weight on an HPU (a spreading string included: on one
    Gaudi process it places everything on the one device)?"""
    if isinstance(device_map, Mapping):
        return all(where is None or _places_on_hpu(where) for where in device_map.values())
    return _places_on_hpu(device_map)


def switch_config(config: Any, quantization_config: Any, device_map: Any,
                  environ: Mapping[str, str]) -> Any:
    """The ``quantization_config`` that loading uses under ``HPU_PLUGIN_FP8``: the user's or
    the checkpoint's when there is one, a ``GaudiFp8Config`` of the switch otherwise, for a
    model placed on an HPU. Activation refused bad values before anything ran."""
    mode = tuning.fp8_mode(environ)
    if mode is None or quantization_config is not None:
        return quantization_config
    if getattr(config, "quantization_config", None) is not None:
        say_once("fp8-switch-prequantized", logging.WARNING,
                 "hpu_plugin: %s=%s is not applied to a checkpoint that is quantized already "
                 "(its quantization_config is used).", tuning.FP8, mode)
        return None
    if not _places_on_hpu(device_map):
        return None
    stats = tuning.fp8_stats(environ)
    say_once(("fp8-switch", mode), logging.INFO,
             "hpu_plugin: %s=%s: loading with GaudiFp8Config(mode=%r, dump_stats_path=%r).",
             tuning.FP8, mode, mode, stats)
    return config_class()(dump_stats_path=stats, mode=mode)


def install_switch(registry: Registry, patches: Patches, module: types.ModuleType) -> None:
    """``from_pretrained`` (``modeling_utils.get_hf_quantizer``) follows ``HPU_PLUGIN_FP8``.

    Its parameters are bound by name, should a later release reorder them.
    """
    if not supported():
        mode = tuning.fp8_mode(os.environ)
        if mode is not None:
            say_once("fp8-switch-old-transformers", logging.WARNING,
                     "hpu_plugin: %s=%s is not applied: %s, or unset %s.", tuning.FP8, mode,
                     _needs_newer(tuning.FP8), tuning.FP8)
        return
    original = original_of(module, "get_hf_quantizer", HOST, "fp8",
                           "modeling_utils.get_hf_quantizer")
    if original is None:
        return
    signature = inspect.signature(original)
    if not {"config", "quantization_config", "device_map"} <= set(signature.parameters):
        stay_out(HOST, "fp8", "config, quantization_config and device_map parameters of "
                 "modeling_utils.get_hf_quantizer")
        return

    @functools.wraps(original)
    def get_hf_quantizer(*args: Any, **kwargs: Any) -> Any:
        if tuning.fp8_mode(os.environ) is None:
            return original(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        given = bound.arguments
        if given.get("quantization_config") is None:
            from transformers.quantizers import auto

            if is_ours_registered(auto):
                given["quantization_config"] = switch_config(
                    given["config"], None, given.get("device_map"), os.environ)
            else:
                say_once("fp8-switch-unregistered", logging.WARNING,
                         "hpu_plugin: %s is ignored: this Transformers has no quantization "
                         "registry for %r (see the stay-out line above).", tuning.FP8,
                         QUANT_METHOD)
        return original(*bound.args, **bound.kwargs)

    patches.set(module, "get_hf_quantizer", ours(get_hf_quantizer))


def is_ours_registered(auto: types.ModuleType) -> bool:
    """Whether Transformers' registry knows :data:`QUANT_METHOD` as this module's."""
    configs = getattr(auto, "AUTO_QUANTIZATION_CONFIG_MAPPING", {})
    return QUANT_METHOD in configs and configs[QUANT_METHOD] is config_class()

