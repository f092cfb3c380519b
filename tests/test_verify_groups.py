"""One registry of verify groups: `dgr.contracts.report.Group` names them, `dgr.verify.checks.<group>`
is each."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from dgr.contracts.report import ALL_GROUPS, GPU_GROUPS, GROUPS, Group
from dgr.verify import checks
from dgr.verify.checks.registry import load
from dgr.verify.checks.session import GroupSpec


@pytest.mark.parametrize("group", ALL_GROUPS)
def test_every_group_of_the_registry_is_a_module(group: Group) -> None:
    assert isinstance(load(group), GroupSpec)


def test_every_group_module_is_in_the_registry() -> None:
    defined = {
        info.name
        for info in pkgutil.iter_modules(checks.__path__)
        if isinstance(
            getattr(importlib.import_module(f"dgr.verify.checks.{info.name}"), "GROUP", None), GroupSpec
        )
    }
    assert defined == set(ALL_GROUPS)


def test_the_groups_of_each_backend() -> None:
    # the CPU runs every group but offload, which needs a GPU device; a GPU backend runs the architectures on
    # its device and the offload of the real models
    assert GROUPS == ("native", "upstream", "series", "archs", "graph", "ownership", "boundary", "kv")
    assert GPU_GROUPS == ("archs", "offload")
    assert set(GROUPS) | set(GPU_GROUPS) == set(ALL_GROUPS)


def test_the_groups_that_need_the_baseline() -> None:
    assert [g for g in GROUPS if load(g).needs_baseline] == ["upstream", "graph", "boundary"]
