"""What every config shares: one error type, value checks, and building a dataclass from a mapping."""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the field and how to fix it."""


def import_hint(target: str, error: BaseException) -> str:
    """Where ``error`` (from building ``target``, a dotted path) is a module that could not be found: how to make it
    importable, in brackets to append to a message; else an empty string."""
    chain, cause = [], error
    while cause is not None and len(chain) < 8:
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    text = " ".join(str(e) for e in chain)
    if not any(isinstance(e, ImportError) for e in chain) and "Error locating target" not in text:
        return ""
    module = target.rsplit(".", 1)[0]
    return (
        f" ({target} is imported by its module's name: run from the directory that holds "
        f"{module.split('.')[0]}, its .py file or package, or add that directory to PYTHONPATH)"
    )


_gathered: ContextVar[list[str] | None] = ContextVar("maze_impala_config_problems", default=None)


def check(ok: bool, name: str, value: object, requirement: str, after: tuple[str, ...] = ()) -> None:
    """Unless ``ok``: a :class:`ConfigError` saying that ``name`` must be ``requirement``, raised at once, or noted
    and raised with the config's other problems within :func:`every_problem`. ``after``: the fields a check across
    fields reads; where one of them was found bad already, this check says nothing (its message would follow from
    that one's, e.g. "at most 0 minibatches" after "envs_per_actor must be >= 1")."""
    if ok:
        return
    message = f"{name} must be {requirement}, got {value!r}"
    problems = _gathered.get()
    if problems is None:
        raise ConfigError(message)
    if not any(said.startswith(f"{field} must be ") for said in problems for field in after):
        problems.append(message)


def joined(problems: list[str]) -> ConfigError:
    """One :class:`ConfigError` naming every problem, on one line (the console shows one)."""
    unique = list(dict.fromkeys(problems))
    if len(unique) == 1:
        return ConfigError(unique[0])
    return ConfigError(f"{len(unique)} invalid values: " + "; ".join(unique))


@contextlib.contextmanager
def every_problem() -> Iterator[None]:
    """Validate a whole config at once: within, :func:`check` notes a failed requirement and validation goes on;
    on leaving, one :class:`ConfigError` names every problem. A ConfigError raised directly ends the gathering
    there, and another exception after a problem was noted is taken for its consequence (a check that did
    arithmetic on a bad value). Nested uses gather into the outermost."""
    if _gathered.get() is not None:
        yield
        return
    problems: list[str] = []
    token = _gathered.set(problems)
    try:
        yield
    except ConfigError as error:
        problems.append(str(error))
    except Exception:
        if not problems:
            raise
    finally:
        _gathered.reset(token)
    if problems:
        raise joined(problems) from None


def finite(value: object) -> bool:
    """A real number (not a bool) that is neither infinite nor NaN."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    check(value in choices, name, value, f"one of {choices}")


def check_keys(cls: type, data: Mapping[str, Any], path: str) -> None:
    """Refuse keys that ``cls`` (a config dataclass) does not have, recursively, naming the valid ones."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in data.items():
        name = f"{path}.{key}" if path else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" Did you mean {(f'{path}.' if path else '') + close[0]!r}?" if close else ""
            raise ConfigError(
                f"unknown key {name!r}: {cls.__name__} has no such field.{hint} Valid keys"
                f"{' of ' + path if path else ''}: {', '.join(fields)}"
            )
        nested = dataclass_type(cls, key)
        if nested is not None and isinstance(value, Mapping):
            check_keys(nested, value, name)


def from_mapping(cls: type[T], data: Mapping[str, Any], path: str = "") -> T:
    """Build the config dataclass ``cls`` from plain data (e.g. a composed Hydra node).

    Unknown keys raise a :class:`ConfigError` naming the key and the valid ones; values are
    converted to the declared types where OmegaConf can (``"1e-3"`` to a float), and a value
    of the wrong type names its full key.
    """
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(data, cls):
        return data
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or cls.__name__} must be a mapping of {cls.__name__}'s fields, got {data!r}")
    check_keys(cls, data, path)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(cls), dict(data))
    except OmegaConfBaseException as error:
        problems = _type_problems(cls, data, path) or [_located(error, path)]
        raise joined(problems) from None
    with every_problem():
        try:
            return OmegaConf.to_object(merged)  # type: ignore[return-value]
        except OmegaConfBaseException as error:
            raise ConfigError(_located(error, path)) from None


def _located(error: Exception, path: str) -> str:
    key = getattr(error, "full_key", None)
    where = f"{path}.{key}" if path and key else (key or path)
    message = str(error).splitlines()[0]
    return f"{where}: {message}" if where else message


def _type_problems(cls: type, data: Mapping[str, Any], path: str) -> list[str]:
    """Every value of ``data`` that ``cls``'s field types refuse (on the error path only: merges key by key)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    problems: list[str] = []
    for key, value in data.items():
        nested = dataclass_type(cls, key)
        if nested is not None and isinstance(value, Mapping):
            problems += _type_problems(nested, value, f"{path}.{key}" if path else str(key))
            continue
        try:
            OmegaConf.merge(OmegaConf.structured(cls), {key: value})
        except OmegaConfBaseException as error:
            problems.append(_located(error, path))
    return problems


def dataclass_type(cls: type, name: str) -> type | None:
    """The config dataclass that field ``name`` of ``cls`` holds, or None for any other field (or no such field)."""
    import typing

    hint = typing.get_type_hints(cls).get(name)
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def to_record(config: Any, **values: Any) -> dict[str, Any]:
    """``config`` (a config dataclass) as plain data, with ``values`` in place of some fields (e.g. a recorded env)."""
    record: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        if f.name in values:
            record[f.name] = values[f.name]
        else:
            value = getattr(config, f.name)
            record[f.name] = dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
    return record


def to_yaml(record: Mapping[str, Any]) -> str:
    """A config record (:func:`to_record`) as the YAML of a run's ``config.yaml``, which Hydra's CLIs read back."""
    from omegaconf import OmegaConf  # here, not above: every actor process imports the config package

    return OmegaConf.to_yaml(OmegaConf.create(dict(record)))


def flat_record(record: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"algorithm": {"lr": 0.002}}`` -> ``{"algorithm.lr": 0.002}``."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            flat.update(flat_record(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat
