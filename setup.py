"""Installs ``hpu_plugin.pth`` beside the package, in regular and editable installs.

Transformers and Accelerate look for ``habana_frameworks`` with ``find_spec`` before they
import torch, so when emulation is requested the emulator's stand-ins must be findable from
interpreter start-up, not only from the ``torch.backends`` entry point. The ``.pth`` line
costs one environment look-up when emulation is off. Everything else is in pyproject.toml.
"""

from __future__ import annotations

import os
from typing import Any

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "hpu_plugin.pth"
SOURCE = os.path.join("hpu_plugin", PTH)


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            self.copy_file(SOURCE, os.path.join(self.build_lib, PTH), preserve_mode=False)


cmdclass: dict[str, Any] = {"build_py": BuildPyWithPth}

try:  # setuptools >= 64: PEP 660 editable installs build a wheel of their own
    from setuptools.command.editable_wheel import editable_wheel

    class EditableWheelWithPth(editable_wheel):
        def _select_strategy(self, *args: Any, **kwargs: Any) -> Any:
            inner = super()._select_strategy(*args, **kwargs)

            class WithPth:
                def __enter__(self) -> WithPth:
                    inner.__enter__()
                    return self

                def __exit__(self, *exc: object) -> Any:
                    return inner.__exit__(*exc)

                def __call__(self, wheel: Any, files: Any, mapping: Any) -> None:
                    inner(wheel, files, mapping)
                    with open(SOURCE, encoding="utf-8") as handle:
                        wheel.writestr(PTH, handle.read())

            return WithPth()

    cmdclass["editable_wheel"] = EditableWheelWithPth
except ImportError:
    pass

setup(cmdclass=cmdclass)
