"""How a multi-process command's ranks are started and bounded: one typed config, validated once.

Every command that runs ranks (``bench``, ``pairs``) embeds a :class:`LaunchConfig`
and an :class:`~fabricscope.outputs.OutputConfig`; the flags that fill the first are
:func:`fabricscope.options.add_launch_options`.  A command's config travels to
spawned ranks, and is kept in its Result, as one flat dict (:func:`flat_config`,
:func:`nested_config`), the layout results have always had.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from fabricscope.errors import InvalidValue, UsageError
from fabricscope.launch.world import MAX_LOCAL_RANKS, MAX_TIMEOUT_S, MIN_TIMEOUT_S
from fabricscope.outputs import OUTPUT_FIELDS, OutputConfig

__all__ = ["BACKENDS", "LAUNCH_FIELDS", "Backend", "LaunchConfig", "flat_config", "nested_config"]

Backend = Literal["auto", "gloo", "nccl"]
BACKENDS: tuple[Backend, ...] = ("auto", "gloo", "nccl")


@dataclass(kw_only=True, slots=True)
class LaunchConfig:
    """How many local ranks, over which backend, bounded by which timeout, meeting where."""

    nproc: int = 2
    """Local ranks to spawn when no launcher started us (a launcher's world size replaces it)."""
    backend: Backend = "auto"
    """``auto`` is NCCL where CUDA is present, else gloo."""
    timeout_s: float = 300.0
    """Bound on every collective or message; a dead or hung rank ends the run after this."""
    master_addr: str | None = None
    master_port: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.nproc <= MAX_LOCAL_RANKS:
            if self.nproc < 1:
                raise InvalidValue(f"must be 1 or more, got {self.nproc}", key="nproc")
            raise InvalidValue(
                f"{self.nproc} is more local ranks than one machine runs: at most {MAX_LOCAL_RANKS}; "
                "for more, start ranks on several nodes with torchrun, mpirun or srun",
                key="nproc",
            )
        if self.backend not in BACKENDS:
            raise UsageError(f"unknown backend {self.backend!r}: allowed are {', '.join(BACKENDS)}")
        if not MIN_TIMEOUT_S <= self.timeout_s <= MAX_TIMEOUT_S:
            raise InvalidValue(
                f"must be between {MIN_TIMEOUT_S:g} s and {MAX_TIMEOUT_S / 86400:g} days, got {self.timeout_s:g} s",
                key="timeout",
            )
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise InvalidValue(f"must be between 1 and 65535, got {self.master_port}", key="master_port")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


LAUNCH_FIELDS = tuple(f.name for f in fields(LaunchConfig))
"""The keys a :class:`LaunchConfig` adds to a command's flat config dict."""


def flat_config(config: Any, *, omit: tuple[str, ...] = ()) -> dict[str, Any]:
    """A command config dataclass with ``launch`` and ``output`` parts as one flat dict (less ``omit``)."""
    data = asdict(config)
    flat = {**{k: v for k, v in data.items() if k not in ("launch", "output")}, **data["launch"], **data["output"]}
    return {k: v for k, v in flat.items() if k not in omit}


def nested_config(data: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of a command config from its flat dict (:func:`flat_config`'s inverse)."""
    rest = dict(data)
    launch = {key: rest.pop(key) for key in LAUNCH_FIELDS if key in rest}
    output = {key: rest.pop(key) for key in OUTPUT_FIELDS if key in rest}
    return {**rest, "launch": LaunchConfig(**launch), "output": OutputConfig(**output)}
