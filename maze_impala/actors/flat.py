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
    envs, logs, T = actor.batch.envs, actor.batch.logs, actor.n_steps
    E = len(envs)
    obs, actions, log_probs = recorder.obs, recorder.actions, recorder.log_probs
    rewards, terminated, truncated = recorder.rewards, recorder.terminated, recorder.truncated
    agents = np.zeros(E, dtype=np.int64)
    returns, lengths = actor.flat_returns, actor.flat_lengths
    names = list(actions)
    # A plain Gymnasium env behind GymStructuredEnv is stepped directly: no Dict wrapping per step.
    direct = [_direct(env) for env in envs]
    obs_array = obs.get(OBS_KEY)
    for t in range(T):
        view = {k: v[t, :E] for k, v in obs.items()}
        taken, log_probs[t, :E] = actor.acting.act(key, view, actor.deterministic, agents)
        for k in names:
            actions[k][t, :E] = taken[k]
        # Python ints for scalar (Discrete) actions: what envs check fastest; arrays otherwise
        row = {k: actions[k][t].tolist() if actions[k].ndim == 2 else actions[k][t] for k in names}
        plain = row.get(ACTION_KEY)
        for e in range(E):
            gym_env = direct[e]
            if gym_env is not None:
                next_obs, reward, term, trunc, _ = gym_env.step(plain[e])
                envs[e].tick()
            else:
                logs[e].step = lengths[e]
                next_obs, reward, term, trunc, _ = envs[e].step({k: row[k][e] for k in names})
            rewards[t, e] = reward
            returns[e] += reward
            lengths[e] += 1
            if term or trunc:
                if gym_env is not None:
                    next_obs = {OBS_KEY: next_obs}
                if term:
                    terminated[t, e] = True
                else:
                    truncated[t, e] = True
                    recorder.add_truncated(t, e, next_obs)
                _end_episode(actor, e)
                store(obs, (t + 1, e), actor.batch.observations[e])
            elif gym_env is not None:
                obs_array[t + 1, e] = next_obs
            else:
                store(obs, (t + 1, e), next_obs)
    recorder.rows[:E] = T + 1
    return T * E


def _end_episode(actor: RolloutActor, e: int) -> None:
    """Publish a finished episode of env ``e`` as the general loop does, and start the next one."""
    batch = actor.batch
    episode_return = float(actor.flat_returns[e])
    summary = batch.logs[e].finish(batch.kpis[e])
    actor.publish_episode(episode_return, actor.flat_lengths[e], {actor.order[0]: episode_return}, summary)
    actor.flat_returns[e], actor.flat_lengths[e] = 0.0, 0
    batch.reset(e)


def flat_state(n_envs: int) -> tuple[list[float], list[int]]:
    """Per env: the return and length of its current episode (Python numbers: cheapest to update)."""
    return [0.0] * n_envs, [0] * n_envs


def _direct(env: object) -> object | None:
    """The Gymnasium env inside a plain GymStructuredEnv with wrapped spaces, else None."""
    if type(env) is GymStructuredEnv and env._wrap_obs and env._wrap_action:
        return env.env
    return None
