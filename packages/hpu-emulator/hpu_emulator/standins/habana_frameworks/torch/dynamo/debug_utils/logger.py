"""Stand-in for ``habana_frameworks.torch.dynamo.debug_utils.logger``: the compile backend's
loggers, the bridge's ``Logger`` of ``utils.debug`` under their names."""

from collections.abc import Callable
from typing import Any

from habana_frameworks.torch.utils.debug import Logger


def get_compile_backend_logger() -> Logger:
    return Logger("PT_COMPILE")


def get_fx_graph_logger() -> Logger:
    return Logger("PT_COMPILE FX GRAPH")


def dump_fx_graph(fx_module: Any, jit_graph: Any, recipe_id: int) -> None:
    """The graph at debug level, as the bridge logs each graph it compiles."""
    logger = get_fx_graph_logger()
    logger.debug("# # # graph_recipe_%d # # #", recipe_id)
    logger.debug(fx_module.print_readable(False))
    logger.debug("IR:\n%s\n\n", fx_module.graph)


def log_function_start_end(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Logs ``fn``'s start (with its arguments) and end at debug level."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        logger = get_compile_backend_logger()
        logger.debug("Function %s start %s, %s", fn.__name__, args, kwargs)
        result = fn(*args, **kwargs)
        logger.debug("Function %s end", fn.__name__)
        return result

    return wrapper
