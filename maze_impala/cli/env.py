"""Which env a command line names: a shipped env config (``env=cutting``) or an env of the user's own
(``env._target_=my_env.MyEnv``), which starts from nothing rather than from the default env's keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from maze_impala.config.overrides import override_key

if TYPE_CHECKING:
    from omegaconf import DictConfig

DEFAULT_ENV = "gym_env"
"""The env config a command line without ``env=`` composes."""
DEFAULT_ENV_KEYS = ("name",)
"""The keys of ``env/gym_env.yaml`` besides its ``_target_``: arguments of the Gymnasium factory, not of a user's."""


def _given(argv: Sequence[str]) -> tuple[list[str], str | None]:
    """The override keys of ``argv``, and the ``env=`` group it chooses (None: the default)."""
    overrides = [a for a in argv if not a.startswith("-") and "=" in a]
    keys = [override_key(o) for o in overrides]
    group = next((o.split("=", 1)[1] for o in reversed(overrides) if override_key(o) == "env"), None)
    return keys, group


def _env_keys_given(keys: list[str], group: str | None) -> set[str] | None:
    """The top-level ``env.*`` keys given where they name an env of the user's own (``env._target_`` on the default
    env config); None where they do not."""
    if "env._target_" not in keys or group not in (None, DEFAULT_ENV):
        return None
    return {k.removeprefix("env.").split(".")[0] for k in keys if k.startswith("env.")}


def _with(argv: list[str], extra: list[str]) -> list[str]:
    """``argv`` with the overrides ``extra`` after its last override: before any option that follows the overrides
    (``--cfg job``), where Hydra's parser would not take them."""
    last = max((i for i, a in enumerate(argv) if "=" in a and not a.startswith("-")), default=len(argv) - 1)
    return [*argv[: last + 1], *extra, *argv[last + 1 :]]


def without_default_env_keys(argv: list[str]) -> list[str]:
    """``env._target_=...`` on the default env config: the default env's own keys deleted (``~env.name``), unless
    given too, so that what Hydra composes (and ``--cfg job`` prints) is the env the run builds."""
    given = _env_keys_given(*_given(argv))
    if given is None:
        return argv
    deleted = {a.removeprefix("~env.").split("=")[0] for a in argv if a.startswith("~env.")}  # a printed command's
    return _with(argv, [f"~env.{key}" for key in DEFAULT_ENV_KEYS if key not in given | deleted])


def rollout_env(argv: list[str]) -> list[str]:
    """A rollout's ``env.*`` keys without an ``env=`` group start from ``env=gym_env``, as training's do, so that
    ``env._target_=my_env.MyEnv`` or ``env.name=Acrobot-v1`` name an env to play (a rollout has no env by default:
    a trained policy plays its run's)."""
    keys, _ = _given(argv)
    if "env" not in keys and any(key.startswith("env.") for key in keys):
        return _with(argv, [f"env={DEFAULT_ENV}"])
    return argv


def env_config(cfg: DictConfig, overrides: Sequence[str]) -> Any:
    """The env config: the composed one, or only the ``env.*`` keys given in ``overrides`` when they set a
    ``_target_`` of their own on the default env config (a composition without the deletions of
    :func:`without_default_env_keys`, as the Python API's)."""
    from omegaconf import OmegaConf

    env = OmegaConf.to_container(cfg.env, resolve=True)
    given = _env_keys_given(*_given(overrides))
    if given is not None and isinstance(env, dict):
        env = {k: v for k, v in env.items() if k in given}
    return env
