"""One guard for every hook form: whatever a plugin raises short of KeyboardInterrupt, in
any form of hook, is reported once naming it, and the decision falls to the next plugin.

Every form (plain, tryfirst, trylast, wrapper before or after its yield) times every kind
of exception a hook can end with (``sys.exit()`` with a code or a message, a misused
``GeneratorExit``, a bare ``BaseException`` subclass, an ordinary error, a stray
``StopIteration``), on two hooks.
"""

from __future__ import annotations

import logging

import pytest

from hpu_plugin.registry import Registry
from hpu_plugin.switches import Selection

FORMS = {
    "plain": ("", "raise {exc}"),
    "tryfirst": ("tryfirst=True", "raise {exc}"),
    "trylast": ("trylast=True", "raise {exc}"),
    "wrapper_before_yield": ("wrapper=True", "raise {exc}\n    yield"),
    "wrapper_after_yield": ("wrapper=True", "yield\n    raise {exc}"),
}
EXCEPTIONS = {
    "sys_exit_0": "SystemExit(0)",
    "sys_exit_message": "SystemExit('bye')",
    "generator_exit": "GeneratorExit('misused')",
    "base_exception": "type('Boom', (BaseException,), {})('boom')",
    "error": "ValueError('bad')",
    "stop_iteration": "StopIteration('stray')",
}
#: hook signature, the call, and the first-party answer that must still come back. A plain
#: or trylast third-party implementation is asked after the first-party ones, which always
#: answer: for those forms the first-party plugins of these hooks are turned off
#: (:data:`ANSWERING`), and the call must come back with none.
HOOKS = {
    "ddp": ("hpu_ddp_backend(requested)", lambda r: r.ddp_backend(None), "hccl"),
    "compile": ("hpu_compile_backend(requested)", lambda r: r.compile_backend(None),
                "hpu_backend"),
}
ANSWERING = frozenset({"ddp", "compile", "gpu_migration"})
ASKED_LAST = ("plain", "trylast")


def _plugin(opts: str, signature: str, body: str) -> str:
    return f"from hpu_plugin.hookspecs import hookimpl\n\n@hookimpl({opts})\ndef {signature}:\n" \
           f"    {body}\n"


def _registry(site, form: str = "tryfirst") -> Registry:
    registry = Registry(Selection(disabled=ANSWERING if form in ASKED_LAST else frozenset()))
    registry.load_entry_points(site.entry_points())
    return registry


def _reports(caplog, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno >= logging.WARNING and f"plugin {name!r}" in r.getMessage()]


@pytest.mark.parametrize("hook", sorted(HOOKS))
@pytest.mark.parametrize("exc", sorted(EXCEPTIONS))
@pytest.mark.parametrize("form", list(FORMS))
def test_every_form_and_exception_is_contained(site, caplog, form, exc, hook):
    opts, body = FORMS[form]
    signature, ask, expected = HOOKS[hook]
    expected = None if form in ASKED_LAST else expected
    site.add("faulty", _plugin(opts, signature, body.format(exc=EXCEPTIONS[exc])),
             dist="faulty-dist", version="1.2")
    registry = _registry(site, form)
    assert ask(registry) == expected  # the program goes on with the next answer
    assert ask(registry) == expected
    [report] = _reports(caplog, "faulty")  # once, however often it faults
    assert "faulty-dist 1.2" in report and "HPU_PLUGIN_DISABLE=faulty-dist:faulty" in report
    record = registry.records["faulty"]
    assert record.status == "faulted" and record.faults


@pytest.mark.parametrize("form", list(FORMS))
def test_keyboard_interrupt_is_the_users_and_passes(site, form):
    opts, body = FORMS[form]
    signature, ask, _ = HOOKS["ddp"]
    site.add("ctrlc", _plugin(opts, signature, body.format(exc="KeyboardInterrupt")))
    with pytest.raises(KeyboardInterrupt):
        ask(_registry(site, form))
