"""A command line's overrides checked against a config's dataclass before Hydra composes: every unknown key and
every value of the wrong type named at once, in the words of the key the user typed."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from maze_impala.config.base import ConfigError, check_keys, dataclass_type

SWEEP_OR_SYNTAX = set(",()[]{}$'\"\\")
"""Characters of Hydra's override grammar beyond a plain value (sweeps, lists, interpolations, quoting): such a
value is left for Hydra to parse and check."""


def override_key(override: str) -> str:
    """The dotted key of a command-line override, without Hydra's ``+``/``++``/``~`` prefix."""
    return override.split("=", 1)[0].lstrip("+~")


def check_overrides(schema: type, overrides: Sequence[str], rollout: bool = False) -> None:
    """Refuse the overrides ``schema`` (a config dataclass) has no field for, with or without ``+``, and the plain
    values its fields' types refuse; every problem of the command line is named in one :class:`ConfigError`.

    (Hydra would suggest ``+key=...`` for an unknown key, which adds the key to the config but not to the run, and
    stop at the first value of a wrong type with a message of several lines.)
    """
    unknown: list[str] = []
    wrong: list[str] = []
    for override in overrides:
        key = override_key(override)
        if rollout and key == "runner" and override.split("=", 1)[1] == "ray":
            raise ConfigError(
                "runner=ray runs training's actors only; a rollout runs with runner=dev (in this "
                "process) or runner=local (worker processes on this machine)"
            )
        if rollout and key.split(".")[0] in ("algorithm", "model"):
            raise ConfigError(
                f"{key} is a training setting and a rollout trains nothing: its policy plays the model "
                "of the run in input_dir (train with maze-run -cn conf_train to change it)"
            )
        if "=" not in override or key.startswith("hydra.") or "@" in key or "/" in key:
            continue
        nested: Any = None
        for part in reversed(key.split(".")):
            nested = {part: nested}
        try:
            check_keys(schema, nested, "")
        except ConfigError as error:
            unknown.append(str(error))
            continue
        if not override.startswith("~"):
            problem = _type_problem(schema, key, override.split("=", 1)[1])
            if problem:
                wrong.append(problem)
    if len(unknown) == 1 and not wrong:
        raise ConfigError(unknown[0])  # with the valid keys
    said = [u.split(" Valid keys")[0] for u in unknown] + wrong
    if len(said) == 1:
        raise ConfigError(said[0])
    if wrong:
        raise ConfigError(f"{len(said)} problems: " + "; ".join(said))
    if said:
        raise ConfigError(f"{len(said)} unknown keys: " + " ".join(said))


def _type_problem(schema: type, key: str, text: str) -> str | None:
    """What is wrong with ``text`` as the value of ``key`` (a known key of ``schema``), or None: a plain value that
    the field's declared type refuses, as Hydra's composition would. A config group's choice (``runner=dev``), a
    field of type Any (``env.*``) and a value in Hydra's wider syntax are not checked here."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    owner: type | None = schema
    *path, name = key.split(".")
    for part in path:
        owner = dataclass_type(owner, part)
        if owner is None:
            return None
    if dataclass_type(owner, name) is not None or SWEEP_OR_SYNTAX & set(text):
        return None
    try:
        value = OmegaConf.from_dotlist([f"value={text}"])["value"]
        OmegaConf.merge(_structured(owner), {name: value})
    except OmegaConfBaseException as error:
        message = str(error).splitlines()[0]
        return f"{key}={text}: {message}"
    return None


@cache
def _structured(cls: type) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.structured(cls)
