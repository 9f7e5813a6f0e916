"""Turn an env description (id, config, callable or instance) into a structured env."""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym

from maze_impala.core import StepKey
from maze_impala.envs.gym_adapter import GymStructuredEnv
from maze_impala.envs.spaces import storage_dtype
from maze_impala.envs.structured import StructuredEnv
from maze_impala.run_files import CONFIG_YAML
from maze_impala.startup import headless_rendering

EnvSpec = str | Mapping[str, Any] | Callable[[], Any]
"""A Gymnasium id, a Hydra-style config with ``_target_``, or a picklable callable."""
WRAPPERS = "wrappers"
"""The key of an env config listing wrappers to apply, in order: dotted paths, or configs with ``_target_`` and their
keyword arguments (the env is passed first), e.g. ``[minigrid.wrappers.ImgObsWrapper]``."""


def make_env(spec: EnvSpec) -> StructuredEnv:
    """Build one structured env; Gymnasium envs are wrapped by :class:`GymStructuredEnv`, PettingZoo envs by the
    PettingZoo adapters. An env instance is taken as it is (for :func:`~maze_impala.check_env` and scripts; a
    run's actors rebuild their envs, so a run takes an id, a config or a factory)."""
    env: Any
    if isinstance(spec, str):
        env = GymStructuredEnv(spec)
    elif isinstance(spec, Mapping):
        if "_target_" not in spec:
            raise ValueError(f"env config needs a _target_ (a class or function to call), got keys {sorted(spec)}")
        from hydra.utils import instantiate

        config = {k: v for k, v in spec.items() if k != WRAPPERS}
        env = wrap(instantiate(config, _convert_="all"), spec.get(WRAPPERS) or [])
    elif isinstance(spec, StructuredEnv | gym.Env) or _pettingzoo(spec) is not None:
        env = spec  # an instance
    elif callable(spec):
        env = spec()
    else:
        raise TypeError(
            f"cannot make an env from {spec!r}: give an id, a config with _target_, a callable, or an "
            "env instance (Gymnasium, PettingZoo or StructuredEnv)"
        )
    env = _pettingzoo(env) or env
    if isinstance(env, gym.Env):
        env = GymStructuredEnv(env)
    if not isinstance(env, StructuredEnv):
        raise TypeError(f"the env factory returned {type(env).__name__}, expected a StructuredEnv or a gymnasium.Env")
    _check_spaces(env)
    return env


def wrap(env: Any, wrappers: Any) -> Any:
    """``env`` inside ``wrappers`` (see :data:`WRAPPERS`), the first innermost. A Gymnasium env adapted by
    :func:`~maze_impala.envs.gym_adapter.make_gym_env`, or a PettingZoo env by
    :func:`~maze_impala.envs.pettingzoo_adapter.make_pettingzoo_env`, is wrapped inside its adapter (PettingZoo
    wrappers such as SuperSuit's ``resize_v1`` then apply)."""
    from hydra.utils import instantiate

    from maze_impala.config import ConfigError
    from maze_impala.envs.pettingzoo_adapter import PettingZooAECEnv, PettingZooParallelEnv

    if not wrappers:
        return env
    if not isinstance(wrappers, list | tuple):
        raise ConfigError(
            f"env.wrappers must be a list of wrappers (dotted paths or configs with _target_), got {wrappers!r}"
        )
    if isinstance(env, GymStructuredEnv) and type(env) is GymStructuredEnv:
        return GymStructuredEnv(wrap(env.env, wrappers), episodic_life=env.episodic_life)
    if type(env) in (PettingZooAECEnv, PettingZooParallelEnv):
        return type(env)(wrap(env.env, wrappers), env.global_state or False)
    if isinstance(env, StructuredEnv):
        raise ConfigError(
            f"env.wrappers wrap Gymnasium and PettingZoo envs; {type(env).__name__} is a structured "
            "env: apply the wrappers inside its factory"
        )
    for wrapper in wrappers:
        if isinstance(wrapper, str):
            wrapper = {"_target_": wrapper}
        if not isinstance(wrapper, Mapping) or "_target_" not in wrapper:
            raise ConfigError(f"env.wrappers: {wrapper!r} is neither a dotted path nor a config with _target_")
        env = instantiate(dict(wrapper), env, _convert_="all")
    return env


def _pettingzoo(env: Any) -> StructuredEnv | None:
    """A PettingZoo env instance, adapted (AEC or Parallel); None for anything else."""
    module = type(env).__module__ or ""
    if not (module.startswith("pettingzoo") or hasattr(env, "possible_agents")):
        return None
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    from maze_impala.envs.pettingzoo_adapter import PettingZooAECEnv, PettingZooParallelEnv

    if isinstance(env, AECEnv):
        return PettingZooAECEnv(env)
    if isinstance(env, ParallelEnv):
        return PettingZooParallelEnv(env)
    return None


def rendering(spec: EnvSpec) -> EnvSpec:
    """``spec`` made with ``render_mode="rgb_array"`` (for videos): an id becomes the config of
    :func:`~maze_impala.envs.gym_adapter.make_gym_env` with it, a ``_target_`` config gets it unless it sets one;
    a factory is taken as it is (it must render by itself). Without a display, SDL draws off-screen
    (:func:`~maze_impala.startup.headless_rendering`)."""
    headless_rendering()
    if isinstance(spec, str):
        return {"_target_": "maze_impala.envs.gym_adapter.make_gym_env", "name": spec, "render_mode": "rgb_array"}
    if isinstance(spec, Mapping) and "render_mode" not in spec and _takes(spec["_target_"], "render_mode"):
        return {**spec, "render_mode": "rgb_array"}
    return spec


def _takes(target: str, argument: str) -> bool:
    """Whether the callable ``target`` (a dotted path) takes ``argument`` (by name, or through ``**kwargs``)."""
    from hydra.utils import get_object

    try:
        parameters = inspect.signature(get_object(target)).parameters.values()
    except (ImportError, ValueError, TypeError, AttributeError):
        return False
    return any(p.name == argument or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


PLAIN = (str, int, float, bool, type(None))


def env_record(spec: EnvSpec) -> str | dict[str, Any]:
    """``spec`` as plain data from which :func:`make_env` rebuilds the env (for ``config.yaml`` and checkpoints).

    Ids and ``_target_`` configs are kept; a class or module-level function becomes
    ``{"_target_": "module.name"}``; ``functools.partial`` of one adds its arguments
    (``_args_`` and keywords, which must be plain data). Anything else (a lambda, a local
    function, an object) cannot be rebuilt by another process or a later run, and raises
    a :class:`~maze_impala.config.ConfigError` saying what to pass instead.
    """
    from maze_impala.config import ConfigError

    if isinstance(spec, str):
        return spec
    if isinstance(spec, Mapping):
        if not _plain(spec):
            raise ConfigError(
                f"the env config {spec!r} holds values that are not plain data (str, numbers, lists, "
                "dicts): pass their config instead"
            )
        return _to_plain(spec)
    if isinstance(spec, functools.partial) and _importable(spec.func):
        if not _plain(list(spec.args)) or not _plain(spec.keywords):
            raise ConfigError(
                f"the env factory {spec!r}: its arguments must be plain data (str, numbers, lists, "
                f"dicts) to be recorded in {CONFIG_YAML}"
            )
        record: dict[str, Any] = {"_target_": _name(spec.func), **_to_plain(spec.keywords)}
        if spec.args:
            record["_args_"] = _to_plain(list(spec.args))
        return record
    if callable(spec) and _importable(spec):
        return {"_target_": _name(spec)}
    raise ConfigError(
        f"cannot record the env factory {spec!r} in the run's config, so the trained policy could not be loaded "
        "with its env: pass a Gymnasium id, a dict config with _target_, a module-level class or function, or "
        "functools.partial of one with plain arguments (not a lambda, a local function or an object)"
    )


def _name(obj: Any) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def _importable(obj: Any) -> bool:
    """Whether ``module.qualname`` of ``obj`` imports back to ``obj`` itself."""
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        return False
    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError):
        return False
    return found is obj


def _plain(value: Any) -> bool:
    if isinstance(value, PLAIN):
        return True
    if isinstance(value, list | tuple):
        return all(_plain(v) for v in value)
    if isinstance(value, Mapping):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return False


def _to_plain(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return [_to_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _to_plain(v) for k, v in value.items()}
    return value


def _check_spaces(env: StructuredEnv) -> None:
    obs_keys, act_keys = set(env.observation_spaces_dict), set(env.action_spaces_dict)
    if obs_keys != act_keys or obs_keys != set(env.agent_counts_dict):
        raise ValueError(
            f"{type(env).__name__}: observation_spaces_dict, action_spaces_dict and agent_counts_dict must "
            f"name the same step keys, got {sorted(map(str, obs_keys))}, {sorted(map(str, act_keys))} and "
            f"{sorted(map(str, env.agent_counts_dict))}"
        )
    for key, count in env.agent_counts_dict.items():
        if not isinstance(count, int) or not (count >= 1 or count == -1):
            raise ValueError(
                f"{type(env).__name__}: agent_counts_dict[{key!r}] must be a positive int, or -1 for a count that "
                f"varies, got {count!r}"
            )
    for key in obs_keys:
        _check_observation_keys(env, key)
        for kind, space in (
            ("observation", env.observation_spaces_dict[key]),
            ("action", env.action_spaces_dict[key]),
        ):
            if not isinstance(space, gym.spaces.Dict):
                raise TypeError(f"{type(env).__name__}: the {kind} space of step key {key!r} must be a gym.spaces.Dict")


def _check_observation_keys(env: StructuredEnv, step_key: StepKey) -> None:
    """Every observation key of ``step_key`` has a space rollouts can store; else an error naming the key and how
    to drop or encode it."""
    for name, space in env.observation_spaces_dict[step_key].spaces.items():
        try:
            storage_dtype(space)
        except TypeError:
            hint = (
                "+env.wrappers=[minigrid.wrappers.ImgObsWrapper] keeps MiniGrid's image only; "
                if name == "mission"
                else ""
            )
            raise ValueError(
                f"{type(env).__name__}: observation {name!r} of step key {step_key!r} is a {type(space).__name__} "
                "space, which maze_impala cannot encode (it encodes Box, Discrete, MultiDiscrete and MultiBinary). "
                f"Drop or encode it with wrappers in the env config: {hint}gymnasium.wrappers.FilterObservation "
                "drops keys, gymnasium.wrappers.FlattenObservation flattens nested spaces"
            ) from None
