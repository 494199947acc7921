"""Saying a thing once: the one "log once" of the package.

A message that repeats on every call (a stay-out line, a plugin's fault, a replaced
``torch.compile`` backend) buries the user's own output, so each is logged the first time
its key is seen. :func:`say_once` uses the process's one :class:`Once`; an owner that must
forget its keys with itself (a registry, a ``torch.compile`` wrapper) keeps its own.
Imports nothing of the package: every layer may use it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable

log = logging.getLogger("hpu_plugin")


class Once:
    """Keys already said; :meth:`first` is true for a key exactly once (thread-safe)."""

    def __init__(self) -> None:
        self._said: set[Hashable] = set()
        self._lock = threading.Lock()

    def first(self, key: Hashable) -> bool:
        """Whether ``key`` is new; it is remembered from now on."""
        with self._lock:
            if key in self._said:
                return False
            self._said.add(key)
            return True

    def say(self, key: Hashable, level: int, message: str, *args: object,
            logger: logging.Logger = log) -> bool:
        """Log ``message % args`` at ``level`` the first time ``key`` is seen; whether it was."""
        if not self.first(key):
            return False
        logger.log(level, message, *args)
        return True

    def forget(self) -> None:
        """Say everything again (tests, and a fresh installation of the owner)."""
        with self._lock:
            self._said.clear()


#: The process's messages said once, keyed by what they are about.
said = Once()


def say_once(key: Hashable, level: int, message: str, *args: object,
             logger: logging.Logger = log) -> bool:
    """Log ``message`` the first time ``key`` is seen in this process; whether it was."""
    return said.say(key, level, message, *args, logger=logger)
