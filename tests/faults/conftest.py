"""Misbehaving third-party plugin distributions, generated and pip-installed for this package.

``hpu-fault-plugins`` holds one entry point per fault (:data:`FAULTS`). Each one misbehaves
only in a process whose ``HPU_FAULT_CASE`` names it and is an ordinary, quiet plugin
otherwise, so the cases do not disturb one another. ``hpu-fault-names`` holds the two
naming faults: a plugin called ``device`` like the first-party one, and one whose
entry-point name (``bad;name``) cannot be written in ``HPU_PLUGIN_DISABLE``; and a healthy
plugin that imports torch at its top (``imports_torch``). Both are
installed with ``tests/extensions``' installer and uninstalled after the last test here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from distributions import pip_installed
from extensions.conftest import NEUTRAL_CWD

#: The gate every generated plugin starts with (``HPU_FAULT_CASE`` may list several).
GATE = 'import os\nACTIVE = {name!r} in os.environ.get("HPU_FAULT_CASE", "").split(",")\n'

_BAD_REPR = ("class Bad(Exception):\n    def __repr__(self):\n        raise RuntimeError('repr')"
             "\n    __str__ = __repr__\n")
#: Import-time faults the registry contains: the body runs at import when the case is active.
IMPORT_FAULTS: dict[str, str] = {
    "imp_exit": "import sys\nsys.exit(3)",
    "imp_exit_none": "import sys\nsys.exit()",
    "imp_base": "raise type('Boom', (BaseException,), {})('base exception at import')",
    "imp_genexit": "raise GeneratorExit('misused at import')",
    "imp_error": "raise RuntimeError('broken at import')",
    "imp_missing": "import hpu_fault_no_such_module_xyz",
    "imp_repr_raises": _BAD_REPR + "raise Bad()",
    "imp_repr_huge": "raise ValueError('x' * 100_000)",
    "imp_slow": "import time\ntime.sleep(1.5)",
    "imp_thread": "import threading, time\nthreading.Thread(target=time.sleep, args=(2,)).start()",
}
#: Import faults no process can contain (it never returns, or ends the process):
#: ``hpu-plugin doctor`` names them, importing each plugin in a child of its own.
#: An import that leaves every later import failing: activation ends failed, and
#: ``import torch`` must still finish (test_installed_plugins.py).
BREAKING_IMPORTS: dict[str, str] = {
    "imp_broken_finder": "import sys\nclass Finder:\n    def find_spec(self, *args):\n"
                         "        raise RuntimeError('broken finder')\n"
                         "sys.meta_path.insert(0, Finder())",
}
FATAL_IMPORTS: dict[str, str] = {
    "imp_loop": "while True:\n    pass",
    "imp_torch_then_hang": "import torch\nimport time\ntime.sleep(3600)",
    "imp_os_exit": "os._exit(7)",
    "imp_abort": "os.abort()",
}

#: Hook-time faults in real programs: (hookimpl options, hook, body of the active branch).
#: Every hook form times every exception is covered in-process by test_hook_forms.py; these
#: hold the promise where the issue saw it broken: torch.compile, init_process_group, the
#: device check and the environment step inside import torch.
_COMPILE = "hpu_compile_backend(requested)"
_DDP = "hpu_ddp_backend(requested)"
_AVAIL = "hpu_device_available()"
_ENVIRON = "hpu_prepare_environment(environ)"
HOOK_FAULTS: dict[str, tuple[str, str, str]] = {
    "compile_exit_after": ("wrapper=True", _COMPILE, "yield\nimport sys; sys.exit(0)"),
    "compile_bogus": ("tryfirst=True", _COMPILE, "return 'bogus'"),
    "ddp_exit_plain": ("tryfirst=True", _DDP, "import sys; sys.exit(0)"),
    "ddp_exit_after": ("wrapper=True", _DDP, "yield\nimport sys; sys.exit(0)"),
    "compile_recursion": ("tryfirst=True", _COMPILE,
                          "import torch\ntorch.compile(lambda x: x * 2)(torch.ones(2))"),
    "avail_exit": ("tryfirst=True", _AVAIL, "import sys; sys.exit(0)"),
    "avail_base": ("tryfirst=True", _AVAIL, "raise type('Boom', (BaseException,), {})()"),
    "environ_exit": ("", _ENVIRON, "import sys; sys.exit(0)"),
}
#: Hook faults that only a job of several ranks reaches: (options, hook, body).
RANK_FAULTS: dict[str, tuple[str, str, str]] = {
    "facts_object": ("", "hpu_job_facts(environ)", "return {'x': object()}"),
}
#: Defaults a plugin's environment hook sets that the settings refuse: (options, hook, body).
DEFAULT_FAULTS: dict[str, tuple[str, str, str]] = {
    "environ_bad_default": ("", _ENVIRON, "environ.setdefault('HPU_PLUGIN_FAST', 'maybe')"),
}
FAULTS = sorted([*IMPORT_FAULTS, *BREAKING_IMPORTS, *FATAL_IMPORTS, *HOOK_FAULTS,
                 *RANK_FAULTS, *DEFAULT_FAULTS])
FAULT_DIST = "hpu-fault-plugins"
NAMES_DIST = "hpu-fault-names"


def _inert(hook: str, opts: str) -> str:
    return "return (yield)" if "wrapper" in opts else "return None"


def _module(name: str) -> str:
    source = GATE.format(name=name) + "from hpu_plugin.hookspecs import hookimpl\n\n"
    body = IMPORT_FAULTS.get(name) or FATAL_IMPORTS.get(name) or BREAKING_IMPORTS.get(name)
    if body:
        return source + "if ACTIVE:\n" + textwrap.indent(body, "    ") + "\n"
    opts, signature, body = (HOOK_FAULTS.get(name) or RANK_FAULTS.get(name)
                             or DEFAULT_FAULTS[name])
    return source + (
        f"\n@hookimpl({opts})\ndef {signature}:\n"
        f"    if ACTIVE:\n{textwrap.indent(body, '        ')}\n"
        f"    {_inert(signature, opts)}\n"
    )


def _distribution(root: Path, dist: str, package: str, modules: dict[str, str],
                  entry_points: dict[str, str]) -> Path:
    tree = root / dist
    (tree / package).mkdir(parents=True)
    (tree / package / "__init__.py").write_text("")
    for module, source in modules.items():
        (tree / package / f"{module}.py").write_text(source)
    points = "\n".join(f'"{name}" = "{value}"' for name, value in entry_points.items())
    (tree / "pyproject.toml").write_text(textwrap.dedent(f"""\
        [build-system]
        requires = ["setuptools>=70.1"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "{dist}"
        version = "0.1"

        [tool.setuptools]
        packages = ["{package}"]

        [project.entry-points.hpu_plugin]
        """) + points + "\n")
    return tree


@pytest.fixture(scope="package")
def fault_plugins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Both fault distributions, pip-installed into the test environment."""
    root = tmp_path_factory.mktemp("fault-dists")
    faults = _distribution(
        root, FAULT_DIST, "hpu_fault_plugins", {name: _module(name) for name in FAULTS},
        {name: f"hpu_fault_plugins.{name}" for name in FAULTS},
    )
    quiet = "from hpu_plugin.hookspecs import hookimpl\n"
    names = _distribution(
        root, NAMES_DIST, "hpu_fault_names",
        {"collide": quiet, "badname": quiet, "torchy": "import torch\n" + quiet,
         "nohooks": quiet, "nohooks2": quiet},
        {"device": "hpu_fault_names.collide", "bad;name": "hpu_fault_names.badname",
         "imports_torch": "hpu_fault_names.torchy", "no_hooks_a": "hpu_fault_names.nohooks",
         "no_hooks_b": "hpu_fault_names.nohooks2", "same_module": "hpu_fault_names.nohooks"},
    )
    with pip_installed({FAULT_DIST: faults, NAMES_DIST: names}):
        yield FAULTS


def environ(**extra: str) -> dict[str, str]:
    """The test's environment without any of our switches or launcher variables."""
    env = {
        key: value for key, value in os.environ.items()
        if not key.startswith(("HPU_PLUGIN_", "HPU_FAULT_", "PT_HPU_", "PT_ENABLE_", "HABANA_",
                               "HLS_", "LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_",
                               "TORCH_DEVICE_BACKEND_AUTOLOAD", "CXX"))
    }
    env.update(extra)
    return env


def run(script: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter, bounded by ``timeout`` seconds (a hang fails
    the test with ``TimeoutExpired`` instead of hanging the suite)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True,
        text=True, timeout=timeout, cwd=NEUTRAL_CWD,
    )


def report(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    """The JSON line a script printed last (``REPORT {...}``)."""
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    assert lines, f"no report; rc={done.returncode}\n{done.stdout}\n{done.stderr}"
    return json.loads(lines[-1][len("REPORT "):])


# In-process cases write real plugin distributions with tests/registry's fixture.
from registry.conftest import _eager_mode, site  # noqa: E402, F401

#: The head of a batch script: what ``hpu_plugin`` logs goes into ``lines``.
KEEP_LOGS = """
import logging
lines = []
class Keep(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
logging.getLogger("hpu_plugin").addHandler(Keep())
"""

#: One process, activation run again for each case (``import torch`` with autoload off):
#: what each ended as, what it logged, whether the emulator started and which Gaudi defaults
#: stayed exported; what a case changed is taken back before the next.
ACTIVATE_EACH = KEEP_LOGS + """
import json, os, sys
import torch
from hpu_plugin import activation
from hpu_plugin.patching import this_process
results = {}
for case, values in CASES.items():
    saved = dict(os.environ)
    os.environ.update(values)
    activation.state.clear()
    activation.state.update(status="off", reason="not run")
    this_process.registry = None
    del lines[:]
    activation.autoload()
    results[case] = {
        "status": activation.state["status"], "reason": activation.state["reason"],
        "emulator": "hpu_plugin_emulator" in sys.modules,
        "exported": [n for n in ("PT_HPU_LAZY_MODE", "PT_ENABLE_INT64_SUPPORT")
                     if n in os.environ and n not in values],
        "messages": list(lines), "tensor": torch.ones(2).tolist()}
    activation.state.update(status="failed")  # the next case starts from nothing changed
    activation._take_back(list(sys.meta_path))
    os.environ.clear()
    os.environ.update(saved)
print("REPORT " + json.dumps(results))
"""


def activate_each(cases: dict[str, dict[str, str]]) -> dict[str, dict[str, object]]:
    """:data:`ACTIVATE_EACH` over ``cases`` (name: environment values): each one's result."""
    done = run(ACTIVATE_EACH.replace("CASES.items()", f"{cases!r}.items()"),
               environ(TORCH_DEVICE_BACKEND_AUTOLOAD="0"), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return report(done)  # type: ignore[return-value]
