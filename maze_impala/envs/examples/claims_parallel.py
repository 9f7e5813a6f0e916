"""The coordination task as a PettingZoo ``ParallelEnv``: agents claim resources at the same time.

Train it through the PettingZoo adapter::

    maze-run -cn conf_train algorithm=impala env=pettingzoo env.name=maze_impala.envs.examples.claims_parallel \\
        env.api=parallel

Every step one of ``n_agents + 1`` resources is blocked at random; each agent sees its own index and the
blocked resource (one-hot) and claims a resource. Every agent earns 1 when the claims cover every open
resource, each a different one, else 0. Optimum: ``n_steps`` per agent and episode; a random team earns
``n!/(n+1)^n`` per step (0.094 for 3 agents).
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv


class ResourceClaims(ParallelEnv):
    metadata = {"name": "resource_claims_v0", "render_modes": []}

    def __init__(self, n_agents: int = 3, n_steps: int = 10):
        if n_agents < 2 or n_steps < 1:
            raise ValueError("ResourceClaims needs n_agents >= 2 and n_steps >= 1")
        self.n_steps, self.n_resources = n_steps, n_agents + 1
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        self.agents: list[str] = []
        self.rng = np.random.default_rng()
        self.time, self.blocked = 0, 0

    @functools.cache  # noqa: B019 (PettingZoo's convention: one space object per agent)
    def observation_space(self, agent: str) -> gym.spaces.Box:
        return gym.spaces.Box(0.0, 1.0, (len(self.possible_agents) + self.n_resources,), np.float32)

    @functools.cache  # noqa: B019
    def action_space(self, agent: str) -> gym.spaces.Discrete:
        return gym.spaces.Discrete(self.n_resources)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.agents, self.time = list(self.possible_agents), 0
        self.blocked = int(self.rng.integers(self.n_resources))
        return self._observations(), {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, int]) -> tuple[dict, dict, dict, dict, dict]:
        claims = [int(actions[agent]) for agent in self.agents]
        success = sorted(claims) == [r for r in range(self.n_resources) if r != self.blocked]
        self.time += 1
        self.blocked = int(self.rng.integers(self.n_resources))
        done = self.time >= self.n_steps
        rewards = {agent: float(success) for agent in self.agents}
        observations = self._observations()
        terminations = {agent: done for agent in self.agents}
        truncations = {agent: False for agent in self.agents}
        infos = {agent: {} for agent in self.agents}
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, infos

    def _observations(self) -> dict[str, np.ndarray]:
        n = len(self.possible_agents)
        observations = {}
        for index, agent in enumerate(self.possible_agents):
            obs = np.zeros(n + self.n_resources, np.float32)
            obs[index] = 1.0
            obs[n + self.blocked] = 1.0
            observations[agent] = obs
        return observations


def parallel_env(n_agents: int = 3, n_steps: int = 10) -> ResourceClaims:
    """The PettingZoo entry point (``env.api=parallel``)."""
    return ResourceClaims(n_agents, n_steps)
