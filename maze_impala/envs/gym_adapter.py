"""Any Gymnasium environment as a structured environment with a single step key."""

from __future__ import annotations

import importlib
from typing import Any

import gymnasium as gym

from maze_impala.core import ActorID, StepKey
from maze_impala.envs.checks import check_step_result
from maze_impala.envs.spaces import within_bounds
from maze_impala.envs.structured import ActorExit, StructuredEnv

OBS_KEY = "observation"
ACTION_KEY = "action"


NAMESPACES = {
    "ALE/": ("ale_py", "ale-py", None),
    "MiniGrid-": ("minigrid", "minigrid", None),
    "BabyAI-": ("minigrid", "minigrid", None),
    "MinAtar/": ("minatar.gym", "minatar", "register_envs"),
}
"""Env id prefixes whose envs a package registers: (module, what to pip install, the module's function that
registers them, or None where importing the module does)."""


def make_gym(name: str, **kwargs: Any) -> gym.Env:
    """``gym.make(name)``, first registering ``name``'s namespace (``ALE/...``: ale_py, ``MiniGrid-...``: minigrid,
    ``MinAtar/...``: minatar) so that no ``module:`` prefix is needed; a clear error if that package is missing."""
    found = next((found for prefix, found in NAMESPACES.items() if name.startswith(prefix)), None)
    if found is not None and ":" not in name and name not in gym.registry:
        module, package, register = found
        try:
            registered = importlib.import_module(module)
        except ImportError:
            raise ValueError(
                f"cannot make Gymnasium env {name!r}: its envs are registered by {module}, which is not installed: "
                f"pip install {package}"
            ) from None
        if register is not None:
            getattr(registered, register)()
        elif hasattr(gym, "register_envs"):
            gym.register_envs(registered)
    try:
        return gym.make(name, **kwargs)
    except gym.error.Error as error:
        raise ValueError(
            f"cannot make Gymnasium env {name!r}: {str(error).rstrip('.')}. Check env.name (a registered Gymnasium "
            "id, e.g. CartPole-v1, or module:Id to import the module that registers it) and its kwargs."
        ) from error


class GymStructuredEnv(StructuredEnv):
    """Wraps a Gymnasium env (a registered id or an instance) with step key ``0``.

    Non-Dict spaces are wrapped into a Dict (``{"observation": ...}``,
    ``{"action": ...}``) and the action is unwrapped again on the way to the env.

    ``episodic_life``: a lost life (the ``lives`` an Atari env reports in its ``info``) ends the decisions the
    learner sees, as the end of an episode does (no bootstrap across it, a recurrent state starts again), while the
    game plays on: the actor exits and re-enters, so that episode statistics, KPIs and evaluations count whole
    games, with their whole score. It takes the actors' general loop rather than the flat fast path.
    """

    STEP_KEY: StepKey = 0
    is_flat = True

    def __init__(self, env: str | gym.Env, episodic_life: bool = False, **make_kwargs: Any):
        self.episodic_life = bool(episodic_life)
        self.is_flat = not self.episodic_life  # the flat fast path takes no exits
        self._lives: int | None = None
        self._exits: dict[ActorID, ActorExit] = {}
        if isinstance(env, str):
            env = make_gym(env, **make_kwargs)
        elif make_kwargs:
            raise ValueError("make_kwargs are only accepted with a registered env id, not an env instance")
        self.env = env
        self._wrap_obs = not isinstance(env.observation_space, gym.spaces.Dict)
        self._wrap_action = not isinstance(env.action_space, gym.spaces.Dict)
        obs_space = gym.spaces.Dict({OBS_KEY: env.observation_space}) if self._wrap_obs else env.observation_space
        act_space = gym.spaces.Dict({ACTION_KEY: env.action_space}) if self._wrap_action else env.action_space
        self._observation_spaces = {self.STEP_KEY: obs_space}
        self._action_spaces = {self.STEP_KEY: act_space}
        self._time = 0

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        return self._action_spaces

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        return self._observation_spaces

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        return {self.STEP_KEY: 1}

    def actor_id(self) -> ActorID:
        return ActorID(self.STEP_KEY, 0)

    def get_env_time(self) -> int:
        return self._time

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._time = 0
        self._lives, self._exits = info.get("lives"), {}
        if self.episodic_life and self._lives is None:
            raise ValueError(
                f"env.episodic_life=true needs an env that reports its lives in info['lives'] (as Atari envs do); "
                f"{self.env} does not: set env.episodic_life=false"
            )
        return self._obs(obs), info

    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        raw_action = within_bounds(self.env.action_space, action[ACTION_KEY] if self._wrap_action else action)
        result = self.env.step(raw_action)
        if len(result) != 5:
            check_step_result(result, self.STEP_KEY)  # raises, naming Gym's old 4-tuple API
        obs, reward, terminated, truncated, info = result
        self._time += 1
        if self.episodic_life:
            lives = info.get("lives", self._lives)
            lost = lives is not None and self._lives is not None and lives < self._lives
            self._exits = {self.actor_id(): ActorExit()} if lost and not (terminated or truncated) else {}
            self._lives = lives
        return self._obs(obs), float(reward), bool(terminated), bool(truncated), info

    @property
    def time_limit(self) -> int | None:
        """The env's registered ``max_episode_steps`` (its TimeLimit), if it has one."""
        spec = getattr(self.env, "spec", None)
        return None if spec is None else spec.max_episode_steps

    def get_actor_exits(self) -> dict[ActorID, ActorExit]:
        """With ``episodic_life``, the actor after the step that lost a life (terminated: no bootstrap)."""
        return self._exits

    def direct_env(self) -> gym.Env | None:
        """The Gymnasium env to step directly instead of this adapter (then call :meth:`tick` after each step),
        when this adapter only wraps its observation and action into Dicts; else None."""
        plain = type(self).step is GymStructuredEnv.step and type(self).reset is GymStructuredEnv.reset
        return self.env if plain and self._wrap_obs and self._wrap_action and not self.episodic_life else None

    def tick(self) -> None:
        """Count a step taken on :meth:`direct_env` directly (the actors' fast path does that)."""
        self._time += 1

    def render(self) -> Any:
        """The wrapped Gymnasium env's ``render()`` (a frame where it was made with ``render_mode="rgb_array"``)."""
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def _obs(self, obs: Any) -> dict:
        return {OBS_KEY: obs} if self._wrap_obs else obs


def make_gym_env(name: str, episodic_life: bool = False, **kwargs: Any) -> GymStructuredEnv:
    """``env=gym_env env.name=<id>``: any registered Gymnasium env, extra keys as ``gym.make`` kwargs;
    ``env.episodic_life=true``: a lost life ends the learner's episode (see :class:`GymStructuredEnv`)."""
    return GymStructuredEnv(name, episodic_life=episodic_life, **kwargs)
