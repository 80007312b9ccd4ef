"""Lua scripts for Redis, kept as ``.lua`` files beside the code that runs them (their
contract, keys and arguments named at their top) and registered the one way every caller
does: ``register_script``, which runs by EVALSHA and falls back to EVAL after a script flush
or on a Redis that never saw it."""

from __future__ import annotations

from importlib.resources import files

import redis
from redis.commands.core import Script


def lua_text(package: str, name: str) -> str:
    """The text of ``<package>/<name>.lua`` (``package`` a dotted package name)."""
    return files(package).joinpath(f"{name}.lua").read_text()


def register(client: redis.Redis, package: str, name: str) -> Script:
    """``<package>/<name>.lua``, registered on ``client``: call it with ``keys=`` and
    ``args=``."""
    return client.register_script(lua_text(package, name))
