"""Env keys as names of torch submodules and buffers.

Step keys, observation keys and action keys come from users' envs; torch refuses a module name that contains a
dot or that is an attribute of the container (``type``, ``train``, ``keys``, ``values``, ...). :func:`module_key`
keeps a key that torch takes as it is (so that the state dicts of existing models keep their names) and escapes
any other one into a name that no key can collide with.
"""

from __future__ import annotations

from torch import nn

_RESERVED = set(dir(nn.ModuleDict())) | set(dir(nn.Module()))
PREFIX = "k:"


def module_key(key: object) -> str:
    """The submodule name of an env key: ``str(key)`` where torch takes it, else an escaped ``k:...`` form."""
    name = str(key)
    if name and "." not in name and name not in _RESERVED and not name.startswith(PREFIX):
        return name
    return PREFIX + name.replace("%", "%25").replace(".", "%2E")
