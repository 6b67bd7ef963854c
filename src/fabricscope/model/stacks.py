"""Which splits a training stack runs (``catalog/frameworks.toml``).

A split fabricscope proposes must be one that Megatron-Core, DeepSpeed or
PyTorch FSDP/torchtitan can run: Megatron's distributed optimizer shards like
ZeRO 1 and goes no further, DeepSpeed's pipeline engine refuses ZeRO 2 and 3,
FSDP with pipeline parallelism keeps its weights gathered between forward and
backward (ZeRO 2).  :func:`stack_for` names the first stack of the table that
runs a split, or None.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fabricscope.errors import UsageError, closest
from fabricscope.model import hardware
from fabricscope.schema import FORBID_EXTRA, build
from fabricscope.userfiles import read_toml

__all__ = ["Stack", "stack_for", "stacks", "stacks_running"]


@dataclass(kw_only=True, slots=True)
class Stack:
    """What one training stack runs, with its source."""

    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    name: str
    frameworks: list[str] = field(default_factory=list)
    zero: list[int]
    zero_with_pp: list[int]
    tensor: bool
    pipeline: bool
    interleave: bool
    context: bool
    expert: bool
    vision: bool
    parameter_servers: bool
    source: str

    def runs(
        self, *, tp: int, pp: int, cp: int, ep: int, zero: int, interleave: int, ps_servers: int, vision: bool = False
    ) -> bool:
        """Whether this stack runs the split (of a vision model: one that is not a transformer)."""
        if vision and not self.vision:
            return False
        if bool(ps_servers) != self.parameter_servers:
            return False
        return (
            (tp == 1 or self.tensor)
            and (pp == 1 or self.pipeline)
            and (interleave == 1 or self.interleave)
            and (cp == 1 or self.context)
            and (ep == 1 or self.expert)
            and zero in (self.zero_with_pp if pp > 1 else self.zero)
        )


@functools.cache
def stacks() -> dict[str, Stack]:
    """Every stack of the table, in its order (the order a split's stack is chosen in)."""
    data = read_toml(str(hardware.catalog_dir() / "frameworks.toml"))
    return {
        name: build(Stack, {"name": name, **entry}, source=f"frameworks.toml [{name}]") for name, entry in data.items()
    }


def stacks_running(framework: str | None) -> tuple[Stack, ...]:
    """The stacks a split may assume: all, or the one that runs ``framework`` (a FRAMEWORKS name or
    a stack's own name)."""
    table = stacks()
    if framework is None:
        return tuple(table.values())
    found = tuple(s for s in table.values() if framework == s.name or framework in s.frameworks)
    if not found:
        names = sorted({*table, *(f for s in table.values() for f in s.frameworks)})
        raise UsageError(f"no stack runs framework {framework!r}{closest(framework, names)}: use {', '.join(names)}")
    return found


def stack_for(allowed: tuple[Stack, ...], **split: Any) -> str | None:
    """The name of the first of ``allowed`` that runs ``split`` (tp, pp, cp, ep, zero, interleave,
    ps_servers, vision), or None."""
    for stack in allowed:
        if stack.runs(**split):
            return stack.name
    return None
