"""Run a trained policy where there is no trainer: numpy and onnxruntime only, no torch, Hydra or Gymnasium.

Export a run (``maze-run -cn conf_export input_dir=outputs/train/<time>``), then, in the service that decides::

    from maze_impala.deploy import DeployedPolicy

    policy = DeployedPolicy.load("outputs/export/<time>")
    state = None
    action, state = policy.act(observation, step_key, state)   # or env.actor_id(), or an agent's name

The exported folder holds ``manifest.json`` (per step key: its graph, its observation and action spaces, its
recurrent state and its action heads; the env's agents; the run's config and the checkpoint's SHA-256) and one graph
per step key: ``step_<key>.onnx`` (``format=onnx``), or the policy's numpy form and weights (``format=numpy``, for
MLP and recurrent policies without a CNN: numpy alone runs it).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from maze_impala.deploy.runtime import DeployedPolicy, DeployError, sample

__all__ = ["DeployError", "DeployedPolicy", "play_episode", "sample"]


def play_episode(
    env: Any,
    policy: DeployedPolicy,
    seed: int | None = None,
    rng: np.random.Generator | None = None,
    max_steps: int | None = None,
) -> tuple[float, int]:
    """One episode of a :class:`~maze_impala.StructuredEnv` (or any env with its ``reset``, ``step`` and
    ``actor_id``) played by ``policy``, every actor with its own recurrent state: its return and its sub-steps.
    ``rng``: sampled actions (None: the most likely); ``max_steps``: sub-steps after which it stops."""
    observation, _ = env.reset(seed=seed)
    states: dict[tuple, dict] = {}
    episode_return, steps, done = 0.0, 0, False
    while not done and (max_steps is None or steps < max_steps):
        actor = tuple(env.actor_id())
        action, states[actor] = policy.act(observation, actor, states.get(actor), rng)
        observation, reward, terminated, truncated, _ = env.step(action)
        episode_return += float(reward)
        steps += 1
        done = bool(terminated or truncated)
    return episode_return, steps
