"""A test plugin whose answers each test sets: "Gaudi ready" without Gaudi or emulator."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hpu_plugin.hookspecs import DeviceProperties, Refusal, hookimpl


@dataclass
class Answers:
    """What the test plugin answers; ``calls`` records what the hosts asked."""

    available: bool = True
    properties: DeviceProperties = field(
        default_factory=lambda: DeviceProperties("hpu", 2, 1, "GAUDI2")
    )
    compile_backend: Any = "eager"
    ddp_backend: str | None = "gloo"
    refuse_ddp: set[str] = field(default_factory=set)
    refuse_compile: bool = False
    device_map: Any = None
    calls: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)


class AnsweringPlugin:
    def __init__(self, answers: Answers) -> None:
        self.answers = answers

    @hookimpl
    def hpu_device_available(self) -> bool:
        self.answers.calls.append(("available", ()))
        return self.answers.available

    @hookimpl
    def hpu_device_properties(self) -> DeviceProperties:
        return self.answers.properties

    @hookimpl
    def hpu_compile_backend(self, requested: Any) -> Any:
        self.answers.calls.append(("compile", requested))
        if self.answers.refuse_compile:
            raise Refusal("test plugin: compiling refused; unset refuse_compile")
        return self.answers.compile_backend

    @hookimpl
    def hpu_ddp_backend(self, requested: str | None) -> str | None:
        self.answers.calls.append(("ddp", requested))
        if requested in self.answers.refuse_ddp:
            raise Refusal(f"test plugin: backend {requested!r} refused; use 'gloo'")
        return self.answers.ddp_backend

    @hookimpl
    def hpu_quantization_device_map(
        self, method: str, bits: int, device_map: Any
    ) -> Any:
        self.answers.calls.append(("quant", (method, bits, device_map)))
        return self.answers.device_map
