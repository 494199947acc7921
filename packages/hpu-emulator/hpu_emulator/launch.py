"""``python -m hpu_emulator run COMMAND``: run a program with ``habana_frameworks`` importable
from its first line, as it is on a Gaudi machine.

Without it the emulator starts inside ``import torch`` and puts its stand-ins on
``sys.path`` then, which serves every program that imports torch first. Gaudi's own scripts
may import ``habana_frameworks`` before torch (the GPU Migration Toolkit must come first):
this launcher gives them the stand-ins on ``PYTHONPATH`` from the start, with emulation
requested, and hands the process over to ``COMMAND``. Nothing runs at interpreter start
for anyone else.
"""

from __future__ import annotations

import os
import shutil
import sys

#: PyTorch's own switch for backend autoload: any value but "1" turns it off, and then
#: nothing starts the emulator inside ``import torch``.
TORCH_AUTOLOAD = "TORCH_DEVICE_BACKEND_AUTOLOAD"


def environment(environ: dict[str, str]) -> dict[str, str]:
    """``environ`` with emulation requested (unless the user set ``HPU_PLUGIN_EMULATE``) and
    the stand-ins appended to ``PYTHONPATH``; ``ValueError`` naming the setting that keeps
    the emulator from starting: stand-ins without a running emulator would send the hosts
    into Gaudi branches for a device that does not exist."""
    from hpu_plugin import settings
    from hpu_plugin.gaudi.software import real_gaudi_installed

    env = dict(environ)
    env.setdefault("HPU_PLUGIN_EMULATE", "1")
    if not settings.emulation_requested(env):
        raise ValueError(f"HPU_PLUGIN_EMULATE={env['HPU_PLUGIN_EMULATE']!r} turns emulation "
                         "off; unset it (or set it to 1) to run on the emulator")
    if settings.is_on(env.get("HPU_PLUGIN_DISABLE")):
        raise ValueError(f"HPU_PLUGIN_DISABLE={env['HPU_PLUGIN_DISABLE']!r} turns the plugin "
                         "off, and with it the emulator; unset it to run on the emulator")
    if env.get(TORCH_AUTOLOAD, "1") != "1":
        raise ValueError(f"{TORCH_AUTOLOAD}={env[TORCH_AUTOLOAD]!r} turns off PyTorch's "
                         "backend autoload, so the emulator cannot start; unset it")
    if real_gaudi_installed():
        raise ValueError("the real Gaudi software (habana_frameworks) is installed here; run "
                         "the program directly, or emulate in an environment without it")
    from hpu_emulator.runtime import STANDINS

    inherited = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    if str(STANDINS) not in inherited:  # appended: never in front of what the user has
        env["PYTHONPATH"] = os.pathsep.join([*inherited, str(STANDINS)])
    return env


def run(command: list[str]) -> int:
    """Replace this process with ``command`` (a program on ``PATH`` and its arguments)."""
    if not command:
        print("hpu_emulator: run needs a command, e.g. python -m hpu_emulator run python "
              "train.py", file=sys.stderr)
        return 2
    try:
        env = environment(dict(os.environ))
    except ValueError as exc:
        print(f"hpu_emulator: {exc}", file=sys.stderr)
        return 2
    program = shutil.which(command[0], path=env.get("PATH"))
    if program is None:
        print(f"hpu_emulator: {command[0]!r} was not found on PATH", file=sys.stderr)
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(program, command, env)
    return 0  # not reached: the process is now the command
