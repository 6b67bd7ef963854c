"""schema.build: pydantic's strict mode over TOML tables, with one line naming the key and what is allowed."""

from __future__ import annotations

import datetime
import tomllib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import pytest

from fabricscope.errors import ConfigError
from fabricscope.schema import FORBID_EXTRA, build, require


@dataclass(kw_only=True, slots=True)
class _Link:
    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    kind: Literal["ethernet", "infiniband"] = "ethernet"
    rate_gbps: float = 100.0
    up: bool = True

    def __post_init__(self) -> None:
        require("rate_gbps", self.rate_gbps, "from 1 to 3200", lambda v: 1 <= v <= 3200)


@dataclass(kw_only=True, slots=True)
class _Node:
    __pydantic_config__: ClassVar[dict[str, Any]] = FORBID_EXTRA
    name: str
    gpus: int = 8
    hosts: tuple[str, ...] = ()
    link: _Link = field(default_factory=_Link)
    links: dict[str, _Link] = field(default_factory=dict)


def _build(text: str) -> _Node:
    return build(_Node, tomllib.loads(text), source="n.toml")


def test_a_good_table_with_a_nested_table_and_an_array() -> None:
    node = _build('name = "a"\ngpus = 4\nhosts = ["h1", "h2"]\n[link]\nkind = "infiniband"\nrate_gbps = 400\n')
    assert node == _Node(name="a", gpus=4, hosts=("h1", "h2"), link=_Link(kind="infiniband", rate_gbps=400.0))
    assert isinstance(node.link.rate_gbps, float)  # a whole number is a number


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "a"\ngpus = "4"\n', "n.toml: gpus = '4': must be a whole number"),
        ('name = "a"\ngpus = 4.0\n', "n.toml: gpus = 4.0: must be a whole number"),
        ('name = "a"\ngpus = true\n', "n.toml: gpus = true: must be a whole number"),
        ('name = "a"\n[link]\nup = 1\n', "n.toml: link.up = 1: must be true or false"),
        ('name = "a"\n[link]\nrate_gbps = "400"\n', "n.toml: link.rate_gbps = '400': must be a number"),
        ('name = "a"\n[link]\nkind = 3\n', "n.toml: link.kind = 3: must be a string"),
        ('name = "a"\n[link]\nkind = "infiniban"\n', "n.toml: link.kind = 'infiniban' is not allowed (did you mean"),
        ('name = "a"\nhosts = "h1"\n', "n.toml: hosts = 'h1': must be a list"),
        ('name = "a"\nhosts = ["h1", 2]\n', "n.toml: hosts = ['h1', 2]: must be a list of strings"),
        ("name = 3\n", "n.toml: name = 3: must be a string"),
        ('name = "a"\nlink = 3\n', "n.toml: link = 3: input should be a dictionary"),
        ('name = "a"\ngpu = 3\n', "n.toml: unknown key 'gpu' (did you mean 'gpus'?): allowed keys are name, gpus"),
        ('name = "a"\n[link]\nrate = 3\n', "n.toml: unknown key 'link.rate'"),
        # A table of tables (calibration.<op>): the keys of the inner dataclass, with a hint.
        (
            'name = "a"\n[links.eth0]\nrate = 3\n',
            "n.toml: unknown key 'links.eth0.rate' (did you mean 'rate_gbps'?): allowed keys are kind, rate_gbps, up",
        ),
        ("gpus = 3\n", "n.toml: missing key 'name'"),
        ('name = "a"\n[link]\nrate_gbps = nan\n', "n.toml: link: rate_gbps must be from 1 to 3200, got nan"),
        ('name = "a\\u001b[2J"\n', "n.toml: name = 'a\\x1b[2J': must be a string without control characters"),
        ('name = "a"\n"g\\u001bpus" = 3\n', "n.toml: the key 'g\\x1bpus' holds control characters"),
        ('name = "a"\ngpus = 1979-05-27\n', "n.toml: gpus = 1979-05-27: a date is not a value fabricscope reads"),
    ],
)
def test_wrong_values_are_refused_not_coerced(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        _build(text)
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)


def test_python_callers_get_the_same_checks() -> None:
    assert build(_Node, {"name": "a", "hosts": ("h1",)}, source="x").hosts == ("h1",)
    with pytest.raises(ConfigError, match=r"^x: when = 2024-01-01: a date is not a value"):
        build(_Node, {"name": "a", "when": datetime.date(2024, 1, 1)}, source="x")
