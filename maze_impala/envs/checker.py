"""``check_env``: the thorough check to run on a new env (like Stable-Baselines3's ``check_env``, for structured
envs). It resets and steps the env with sampled, allowed actions and checks everything it returns, with the checks of
:mod:`maze_impala.envs.checks`; training runs the cheap part of them (:func:`check_observation`,
:func:`check_step_result`) on the first sub-steps of every env, so a broken env fails at the start of a run with the
same messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from maze_impala.core import ActorID, StepKey
from maze_impala.envs.checks import (
    EnvCheckError,
    check_actor_id,
    check_masks,
    check_observation,
    check_reward,
    check_step_result,
    sample_action,
)
from maze_impala.envs.structured import ActorExit, StructuredEnv

__all__ = ["EnvCheckError", "EnvCheckReport", "check_env"]


@dataclass(frozen=True)
class EnvCheckReport:
    """What :func:`check_env` checked: the sub-steps taken, the episodes begun, the step keys and actors seen."""

    sub_steps: int
    episodes: int
    step_keys: tuple[StepKey, ...]
    actors: int

    def __str__(self) -> str:
        keys = ", ".join(map(str, self.step_keys))
        return (
            f"check_env: passed {self.sub_steps} sub-steps over {self.episodes} episode(s), step keys {keys}, "
            f"{self.actors} actor(s): seeded resets reproduce, observations, actions, masks, rewards and actor "
            "exits fit their spaces per step key, and the env time never decreases"
        )


def check_env(env: Any, n_steps: int = 300, seed: int = 0, verbose: bool = True) -> EnvCheckReport:
    """Reset and step ``env`` (a :class:`StructuredEnv`, or anything :func:`~maze_impala.envs.factory.make_env`
    takes) with sampled allowed actions for ``n_steps`` sub-steps; raises :class:`EnvCheckError` at the first
    broken promise, naming the step key, the space or key, and what was expected and found. Returns what was
    checked, and prints it where ``verbose``.
    """
    from maze_impala.envs.factory import make_env

    env = env if isinstance(env, StructuredEnv) else make_env(env)  # make_env checks the spaces' step keys
    rng = np.random.default_rng(seed)
    first = _reset(env, seed)
    again = _reset(env, seed)
    for key in first:
        if not np.array_equal(np.asarray(first[key]), np.asarray(again[key])):
            raise EnvCheckError(
                f"reset(seed={seed}) twice gave different first observations (key {key!r}): seeding "
                "must make an episode reproducible"
            )
    obs, time = again, env.get_env_time()
    episodes, keys, actors = 1, {}, set()
    for _ in range(n_steps):
        actor = check_actor_id(env)
        keys[actor.step_key] = None
        actors.add(tuple(actor))
        masks = check_masks(obs, env.action_spaces_dict[actor.step_key], actor.step_key)
        action = sample_action(env.action_spaces_dict[actor.step_key], masks, rng)
        obs, _, terminated, truncated, _ = check_step_result(env.step(action), actor.step_key)
        _check_actor_outputs(env, actor.step_key)
        now = env.get_env_time()
        if not isinstance(now, int | np.integer) or now < time:
            raise EnvCheckError(
                f"step key {actor.step_key!r}: get_env_time() must be an int that never decreases "
                f"within an episode, found {now!r} after {time!r}"
            )
        time = now
        if terminated or truncated:
            obs, time = _reset(env, int(rng.integers(2**31))), env.get_env_time()
            episodes += 1
        else:
            key = check_actor_id(env).step_key
            check_observation(obs, env.observation_spaces_dict[key], key)
    report = EnvCheckReport(n_steps, episodes, tuple(keys), len(actors))
    if verbose:
        print(report)
    return report


def _reset(env: StructuredEnv, seed: int) -> dict:
    result = env.reset(seed=seed)
    if not isinstance(result, tuple) or len(result) != 2:
        raise EnvCheckError(f"reset() must return (obs, info), found {type(result).__name__} {result!r:.80}")
    obs, _ = result
    if env.get_env_time() != 0:
        raise EnvCheckError(f"get_env_time() must be 0 after reset(), found {env.get_env_time()!r}")
    actor = check_actor_id(env)
    check_observation(obs, env.observation_spaces_dict[actor.step_key], actor.step_key)
    return obs


def _check_actor_outputs(env: StructuredEnv, step_key: StepKey) -> None:
    rewards = env.get_actor_rewards()
    if rewards is not None:
        if not isinstance(rewards, Mapping):
            raise EnvCheckError(
                f"step key {step_key!r}: get_actor_rewards() must return None or a dict ActorID -> "
                f"reward, found {type(rewards).__name__}"
            )
        for actor, reward in rewards.items():
            check_reward(reward, ActorID(*actor).step_key, f"reward of actor {tuple(actor)} (get_actor_rewards)")
    exits = env.get_actor_exits()
    if not isinstance(exits, Mapping) or not all(isinstance(e, ActorExit) for e in exits.values()):
        raise EnvCheckError(
            f"step key {step_key!r}: get_actor_exits() must return a dict ActorID -> ActorExit, found {exits!r:.80}"
        )
    for actor, exit_ in exits.items():
        key = ActorID(*actor).step_key
        if exit_.observation is not None:
            check_observation(exit_.observation, env.observation_spaces_dict[key], key, "exit observation")
