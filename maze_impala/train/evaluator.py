"""The rollout evaluator: a fixed set of episodes, run side by side, after every epoch."""

from __future__ import annotations

import numpy as np
import torch

from maze_impala.actors.actor import seed_for, to_torch
from maze_impala.envs.batch import EnvBatch
from maze_impala.envs.factory import EnvSpec, make_env
from maze_impala.events.interfaces import EpisodeEvents
from maze_impala.nn.models import StructuredPolicy


class RolloutEvaluator:
    """Runs ``n_episodes`` episodes (one per env, batched by step key) with fixed seeds, so that epochs compare."""

    def __init__(self, env: EnvSpec, n_episodes: int, deterministic: bool, seed: int, events: EpisodeEvents):
        self.batch = EnvBatch([make_env(env) for _ in range(n_episodes)], auto_reset=False)
        self.deterministic = deterministic
        self.seeds = [seed_for(seed, 2**31 - 1, i) for i in range(n_episodes)]
        self.sampling_seed = seed_for(seed, 2**31 - 2)
        self.events = events

    @torch.no_grad()
    def evaluate(self, policy: StructuredPolicy) -> float:
        """Mean return over the episodes; publishes each episode's return and length."""
        device = next(policy.parameters()).device
        batch, n = self.batch, len(self.batch)
        for e in range(n):
            batch.reset(e, seed=self.seeds[e])
        returns = np.zeros(n)
        active = np.ones(n, dtype=bool)
        generator = torch.Generator(device).manual_seed(self.sampling_seed)  # same draws every evaluation
        while active.any():
            for key, group in batch.groups(np.flatnonzero(active)).items():
                obs = {k: v.to(device) for k, v in to_torch(batch.stacked(group)).items()}
                agents = torch.tensor([batch.actors[e].agent_id for e in group], device=device)
                actions, _ = policy.act(key, obs, self.deterministic, generator, agent_ids=agents)
                actions = {k: a.cpu().numpy() for k, a in actions.items()}
                for i, e in enumerate(group):
                    sub = batch.step(e, {k: a[i] for k, a in actions.items()})
                    if sub.episode_ended:
                        active[e] = False
                        returns[e] = sub.episode_return
                        self.events.episode_return(value=sub.episode_return)
                        self.events.episode_length(value=sub.episode_length)
        return float(returns.mean())

    def close(self) -> None:
        self.batch.close()
