"""How a group of `dgr verify` is found: the module `dgr.verify.checks.<group>` and its `GROUP`. Kept out of
the session, which the groups import, so that the session never loads a group (the native one included)."""

from __future__ import annotations

import importlib

from dgr.contracts.report import Group
from dgr.verify.checks.session import GroupSpec


def load(group: Group) -> GroupSpec:
    """The `GROUP` of the module `dgr.verify.checks.<group>`."""
    spec = getattr(importlib.import_module(f"dgr.verify.checks.{group}"), "GROUP", None)
    if not isinstance(spec, GroupSpec):
        raise TypeError(f"dgr.verify.checks.{group} defines no GROUP (a GroupSpec)")
    return spec
