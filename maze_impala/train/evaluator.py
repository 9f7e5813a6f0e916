"""The rollout evaluator: a fixed set of episodes, run side by side, after every epoch."""

from __future__ import annotations

import numpy as np
import torch

from maze_impala.actors.actor import allocate, seed_for, single_step_key, store, to_torch
from maze_impala.envs.factory import EnvSpec, make_env
from maze_impala.events.interfaces import EpisodeEvents
from maze_impala.nn.models import StructuredPolicy


class RolloutEvaluator:
    """Runs ``n_episodes`` episodes (one per env, batched) with fixed seeds, so that epochs compare fairly."""

    def __init__(self, env: EnvSpec, n_episodes: int, deterministic: bool, seed: int, events: EpisodeEvents):
        self.envs = [make_env(env) for _ in range(n_episodes)]
        self.step_key = single_step_key(self.envs[0])
        self.obs_space = self.envs[0].observation_spaces_dict[self.step_key]
        self.deterministic = deterministic
        self.seeds = [seed_for(seed, 2**31 - 1, i) for i in range(n_episodes)]
        self.sampling_seed = seed_for(seed, 2**31 - 2)
        self.events = events

    @torch.no_grad()
    def evaluate(self, policy: StructuredPolicy) -> float:
        """Mean return over the episodes; publishes each episode's return and length."""
        device = next(policy.parameters()).device
        n = len(self.envs)
        obs = allocate(self.obs_space, (n,))
        for e, env in enumerate(self.envs):
            store(obs, e, env.reset(seed=self.seeds[e])[0])
        returns, lengths = np.zeros(n), np.zeros(n, dtype=np.int64)
        active = np.ones(n, dtype=bool)
        generator = torch.Generator(device).manual_seed(self.sampling_seed)  # same draws every evaluation
        while active.any():
            actions, _ = policy.act(
                self.step_key, {k: v.to(device) for k, v in to_torch(obs).items()}, self.deterministic, generator
            )
            actions = {k: a.cpu().numpy() for k, a in actions.items()}
            for e in np.flatnonzero(active):
                next_obs, reward, term, trunc, _ = self.envs[e].step({k: a[e] for k, a in actions.items()})
                returns[e] += reward
                lengths[e] += 1
                if term or trunc:
                    active[e] = False
                store(obs, e, next_obs)
        for e in range(n):
            self.events.episode_return(value=float(returns[e]))
            self.events.episode_length(value=int(lengths[e]))
        return float(returns.mean())

    def close(self) -> None:
        for env in self.envs:
            env.close()
