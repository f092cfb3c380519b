"""The backends a build can run layers on: the CPU (the default, always built) or a GPU backend on top of
it (locks/toolchain.toml [toolchain.backends.NAME])."""

from __future__ import annotations

from typing import Literal, get_args

Backend = Literal["cpu", "vulkan"]
BACKENDS: tuple[Backend, ...] = get_args(Backend)
