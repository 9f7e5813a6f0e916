"""The fast path of the actor for flat envs: one actor, every ``step()`` a structured step.

The general loop of :class:`~maze_impala.actors.actor.RolloutActor` groups envs by
step key, tracks reward crediting and actor exits per sub-step; none of that can
happen in a flat env (a Gymnasium env, ``StructuredEnv.is_flat``), so this loop
writes straight into the recorder's ``[T + 1, E]`` buffers: one batched forward pass
per step, then one ``env.step`` per env and a few array writes. It records exactly
what the general loop records (a test checks it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from maze_impala.actors.recorder import store
from maze_impala.envs.gym_adapter import ACTION_KEY, OBS_KEY, GymStructuredEnv

if TYPE_CHECKING:
    from maze_impala.actors.actor import RolloutActor


def run_flat(actor: RolloutActor) -> int:
    """Fill the recorder of the only step key with ``n_steps`` steps of every env; returns the env steps."""
    key = actor.order[0]
    recorder = actor.recorders[key]
    envs, T = actor.batch.envs, actor.n_steps
    E = len(envs)
    obs, actions, log_probs = recorder.obs, recorder.actions, recorder.log_probs
    agents = np.zeros(E, dtype=np.int64)
    names = list(actions)
    # Plain Gymnasium envs behind GymStructuredEnv are stepped directly: no Dict wrapping per step.
    direct = [_direct(env) for env in envs]
    all_direct = all(env is not None for env in direct)
    for t in range(T):
        view = {k: v[t, :E] for k, v in obs.items()}
        taken, log_probs[t, :E] = actor.acting.act(key, view, actor.deterministic, agents)
        for k in names:
            actions[k][t, :E] = taken[k]
        if all_direct and not actor.batch.checks_left.any():  # the first steps go the checked way
            taken = actions[ACTION_KEY][t, :E]
            # Python ints for scalar (Discrete) actions: what envs check fastest; arrays otherwise
            _step_direct(actor, t, direct, taken.tolist() if taken.ndim == 1 else list(taken))
        else:
            row = {k: actions[k][t].tolist() if actions[k].ndim == 2 else actions[k][t] for k in names}
            for e in range(E):
                _step_one(actor, t, e, direct[e], {k: row[k][e] for k in names})
    recorder.rows[:E] = T + 1
    return T * E


def _step_direct(actor: RolloutActor, t: int, gym_envs: list, actions: list) -> None:
    """Step ``t`` of every env, all plain Gymnasium envs: the per-env work is the ``step`` call alone."""
    recorder, envs = actor.recorders[actor.order[0]], actor.batch.envs
    E = len(envs)
    next_obs, rewards, ended = [], [], []
    for e, (env, action) in enumerate(zip(gym_envs, actions)):
        observation, reward, terminated, truncated, _ = env.step(action)
        next_obs.append(observation)
        rewards.append(reward)
        if terminated or truncated:
            ended.append((e, terminated))
        envs[e].tick()
    stacked = np.asarray(next_obs)
    if stacked.shape[1:] != recorder.obs[OBS_KEY].shape[2:]:  # never broadcast a wrong shape into the buffer
        raise ValueError(f"step key {actor.order[0]!r}: observation {OBS_KEY!r} expected shape "
                         f"{recorder.obs[OBS_KEY].shape[2:]} (its space), found {stacked.shape[1:]}")  # fmt: skip
    recorder.obs[OBS_KEY][t + 1, :E] = stacked
    returns = np.asarray(rewards, dtype=np.float64)  # episode returns add the rewards as the env gave them
    recorder.rewards[t, :E] = returns
    actor.flat_returns += returns
    actor.flat_lengths += 1
    for e, terminated in ended:
        _close(actor, t, e, terminated, {OBS_KEY: next_obs[e]})


def _step_one(actor: RolloutActor, t: int, e: int, gym_env: object | None, action: dict) -> None:
    """Step ``t`` of env ``e``, directly if it is a plain Gymnasium env."""
    recorder, batch = actor.recorders[actor.order[0]], actor.batch
    if gym_env is not None and not batch.checks_left[e]:
        observation, reward, terminated, truncated, _ = gym_env.step(action[ACTION_KEY])
        batch.envs[e].tick()
        observation = {OBS_KEY: observation}
    else:
        batch.logs[e].step = int(actor.flat_lengths[e])
        result = batch.envs[e].step(action)
        if batch.checks_left[e]:
            result = batch.check_substep(e, result)
        observation, reward, terminated, truncated, _ = result
    recorder.rewards[t, e] = reward
    actor.flat_returns[e] += reward
    actor.flat_lengths[e] += 1
    if terminated or truncated:
        _close(actor, t, e, terminated, observation)
    else:
        store(recorder.obs, (t + 1, e), observation)


def _close(actor: RolloutActor, t: int, e: int, terminated: bool, final_obs: dict) -> None:
    """Env ``e`` ended its episode at step ``t``: mark the decision, publish the episode, start the next one."""
    recorder = actor.recorders[actor.order[0]]
    if terminated:
        recorder.terminated[t, e] = True
    else:
        recorder.truncated[t, e] = True
        recorder.add_truncated(t, e, final_obs)
    _end_episode(actor, e)
    store(recorder.obs, (t + 1, e), actor.batch.observations[e])


def _end_episode(actor: RolloutActor, e: int) -> None:
    """Publish a finished episode of env ``e`` as the general loop does, and start the next one."""
    batch = actor.batch
    episode_return = float(actor.flat_returns[e])
    summary = batch.logs[e].finish(batch.kpis[e])
    length = int(actor.flat_lengths[e])
    actor.publish_episode(episode_return, length, {actor.order[0]: episode_return}, summary)
    actor.flat_returns[e], actor.flat_lengths[e] = 0.0, 0
    batch.reset(e)


def flat_state(n_envs: int) -> tuple[np.ndarray, np.ndarray]:
    """Per env: the return and length of its current episode."""
    return np.zeros(n_envs, dtype=np.float64), np.zeros(n_envs, dtype=np.int64)


def _direct(env: object) -> object | None:
    """The Gymnasium env inside a plain GymStructuredEnv with wrapped spaces, else None."""
    if type(env) is GymStructuredEnv and env._wrap_obs and env._wrap_action:
        return env.env
    return None
