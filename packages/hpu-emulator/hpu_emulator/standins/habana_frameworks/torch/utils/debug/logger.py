"""Stand-in for ``habana_frameworks.torch.utils.debug.logger``: the bridge's Python
``Logger`` (messages to its ``PT_PYTHON`` logger, prefixed by the logger's type) and the
level functions tests and tools call."""

from typing import Any

from habana_frameworks.torch.utils import _debug_C


def format_args(args: tuple[Any, ...]) -> str:
    """The message as the bridge builds it: a first string with ``{}`` or ``%`` formats the
    rest into it, else the arguments are joined by commas."""
    if args and isinstance(args[0], str):
        text, rest = args[0], args[1:]
        if "{}" in text:
            return text.format(*map(str, rest)) if rest else ""
        if "%" in text:
            return text % tuple(rest)
    return ", ".join(map(str, args))


class Logger:
    """One named source of messages (``PT_COMPILE``, ...); ``set_store_data(True)`` keeps
    every message in ``data`` too, written or not, which tests read back."""

    def __init__(self, type: str) -> None:
        self.type = type
        self.store_data = False
        self.data: list[str] = []

    def log(self, level: int, args: tuple[Any, ...]) -> None:
        enabled = _debug_C.is_log_python_enabled(level)
        if enabled or self.store_data:
            message = f"[{self.type}] {format_args(args)}"
            if enabled:
                _debug_C.log_python(level, message)
            if self.store_data:
                self.data.append(message)

    def trace(self, *args: Any) -> None:
        self.log(_debug_C.log_level.trace, args)

    def debug(self, *args: Any) -> None:
        self.log(_debug_C.log_level.debug, args)

    def info(self, *args: Any) -> None:
        self.log(_debug_C.log_level.info, args)

    def warn(self, *args: Any) -> None:
        self.log(_debug_C.log_level.warn, args)

    def error(self, *args: Any) -> None:
        self.log(_debug_C.log_level.error, args)

    def critical(self, *args: Any) -> None:
        self.log(_debug_C.log_level.critical, args)

    def set_store_data(self, enable: bool) -> None:
        self.store_data = enable
        self.data = []


def get_log_level(logger_level: str) -> "_debug_C.log_level":
    """The level named ``trace`` ... ``critical``; another name is refused, as there."""
    try:
        return _debug_C.log_level[logger_level]
    except KeyError:
        raise AssertionError(f"unsupported logger_level = {logger_level}") from None


def enable_logging(logger_name: str, logger_level: str) -> None:
    _debug_C.enable_logging(logger_name, get_log_level(logger_level))
