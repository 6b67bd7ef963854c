"""The public API of fabricscope.doctor: explicit, sorted, importable, and its doc example runs."""

from __future__ import annotations

import doctest

import pytest
from doctor_helpers import REPO

import fabricscope.doctor
from fabricscope.doctor import diagnosis


def test_all_is_sorted_and_every_name_resolves() -> None:
    names = fabricscope.doctor.__all__
    assert names == sorted(names)
    for name in names:
        assert getattr(fabricscope.doctor, name) is not None
    assert callable(fabricscope.doctor.diagnose)  # the function, not the module of a similar name
    with pytest.raises(AttributeError):
        _ = fabricscope.doctor.no_such_name


def test_docstring_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    failures, tried = doctest.testmod(diagnosis, report=True)
    assert tried > 0 and failures == 0


def test_every_check_is_documented() -> None:
    from fabricscope.doctor.checks import CHECKS

    text = (REPO / "docs/doctor.md").read_text(encoding="utf-8")
    for check in CHECKS:
        assert f"`{check.id}`" in text, check.id
    assert "`fleet.report`" in text and "`fleet.consistency`" in text
