"""Who called: the file and line a warning about the user's code must name.

A replacement installed in a host (``torch.compile``) runs below the code that called it;
a warning is only useful if it names that code. Frames inside ``hpu_plugin`` and torch are
skipped. A call made by a library while it is being imported (bitsandbytes decorates
functions with ``@torch.compile`` at import) is not the user's doing: the caller reports
it as such, so it can be logged at debug instead of warning about code nobody wrote.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
from dataclasses import dataclass
from types import FrameType

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _library_dirs() -> tuple[str, ...]:
    paths = {sysconfig.get_paths().get(key, "") for key in ("purelib", "platlib", "stdlib")}
    try:
        paths.update(site.getsitepackages())
    except AttributeError:  # virtualenv's old site module
        pass
    return tuple(os.path.abspath(path) + os.sep for path in paths if path)


_LIBRARIES = _library_dirs()


def _ours(filename: str) -> bool:
    if filename.startswith(_HERE) or filename.startswith("<frozen"):
        return True
    torch = sys.modules.get("torch")
    root = os.path.dirname(getattr(torch, "__file__", None) or "\0")
    return filename.startswith(root + os.sep)


@dataclass(frozen=True)
class Caller:
    """The first frame outside hpu_plugin and torch."""

    where: str  # "path/to/file.py:12"
    library: bool  # in an installed package, not the user's own code
    importing: bool  # its module is being imported right now

    @property
    def import_time_library(self) -> bool:
        """A library decorating its own code while it is imported."""
        return self.library and self.importing


def _importing(frame: FrameType) -> bool:
    module = sys.modules.get(frame.f_globals.get("__name__", ""))
    spec = getattr(module, "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def find_caller(depth: int = 1) -> Caller | None:
    """The nearest calling frame that is neither hpu_plugin nor torch; ``None`` if none."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not _ours(filename):
            return Caller(
                f"{frame.f_code.co_filename}:{frame.f_lineno}",
                filename.startswith(_LIBRARIES),
                _importing(frame),
            )
        frame = frame.f_back
    return None
