"""Run unchanged Hugging Face code on Intel Gaudi (torch device ``hpu``).

:func:`autoload` runs inside every ``import torch`` (the ``torch.backends`` entry point), so
this module imports nothing at its top: without Gaudi it answers itself and is the only
module of the package loaded; everything else goes to ``hpu_plugin.activation``.
"""

__version__ = "0.1.0"

#: What activation did: ``status`` off (not run yet) | skipped | active | failed, a
#: ``reason``, and ``emulator`` "started" once the emulator runs. Here, so every layer reads
#: it without importing activation.
state: dict[str, str] = {"status": "off", "reason": "not run"}

#: Why the plugin is off on a machine without Gaudi (the common case).
NO_GAUDI = "no Gaudi software and no emulation requested"


def autoload() -> None:
    """Entry point of the ``torch.backends`` group; idempotent; never raises.

    The common case, no ``HPU_PLUGIN_*`` variable set and no ``habana_frameworks`` to be
    found, is answered with one pass over the environment's names and one ``find_spec``.
    Anything else, a broken finder on ``sys.meta_path`` included, goes to
    ``activation.autoload``, which reports what it finds.
    """
    if state["status"] != "off":
        return
    try:
        import importlib.util
        import os

        if (
            not any(name.startswith("HPU_PLUGIN_") for name in os.environ)  # a misspelt one?
            and importlib.util.find_spec("habana_frameworks") is None
        ):
            state.update(status="skipped", reason=NO_GAUDI)
            return
    except Exception:  # a broken finder: the full path below reports it
        pass
    try:
        from hpu_plugin.activation import autoload as activate
    except Exception as exc:  # a damaged installation must not break `import torch`
        import logging

        state.update(status="failed", reason=f"{type(exc).__name__}: {exc}")
        logging.getLogger("hpu_plugin").error(
            "hpu_plugin: activation failed, the plugin is off: %s", state["reason"])
        return
    activate()
