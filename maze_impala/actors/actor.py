"""The actor: steps ``E`` environments side by side with one batched forward pass per step."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch

from maze_impala.core import Actor, Rollout, StepKey, Trajectory, WeightSource
from maze_impala.envs.factory import EnvSpec, make_env
from maze_impala.envs.structured import StructuredEnv
from maze_impala.events.api import EventCollector, EventHub
from maze_impala.events.interfaces import EpisodeEvents
from maze_impala.nn.models import ModelConfig, StructuredPolicy, storage_dtype


def allocate(space: gym.spaces.Dict, leading: tuple[int, ...]) -> dict[str, np.ndarray]:
    """Zeroed storage for a Dict space with ``leading`` batch/time axes."""
    return {k: np.zeros(leading + tuple(s.shape), dtype=storage_dtype(s)) for k, s in space.spaces.items()}


def store(storage: dict[str, np.ndarray], index: int | tuple[int, int], obs: Mapping) -> None:
    """Write one Dict observation into preallocated storage at ``index``."""
    for key, array in storage.items():
        array[index] = obs[key]


def to_torch(arrays: Mapping[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Zero-copy view of numpy storage as tensors."""
    return {k: torch.from_numpy(v) for k, v in arrays.items()}


def seed_for(*entropy: int) -> int:
    """A well-mixed 32-bit seed from the run seed and indices (actor, env, ...)."""
    return int(np.random.SeedSequence(list(entropy)).generate_state(1)[0])


def single_step_key(env: StructuredEnv) -> StepKey:
    """The one step key of a flat env; multi-step envs are rejected with a clear error."""
    counts = env.agent_counts_dict
    if len(counts) != 1 or next(iter(counts.values())) != 1:
        raise NotImplementedError(
            f"{type(env).__name__} announces step keys {counts}; this version of the actor runs envs with a "
            "single step key and a single agent (e.g. Gymnasium envs)."
        )
    return next(iter(counts))


@dataclass
class ActorSpec:
    """Everything needed to build an actor, picklable so that it can travel to a worker process."""

    env: EnvSpec
    model: ModelConfig
    n_rollout_steps: int
    envs_per_actor: int
    seed: int

    def build(self, index: int, weights: WeightSource) -> RolloutActor:
        envs = [make_env(self.env) for _ in range(self.envs_per_actor)]
        return RolloutActor(envs, weights, self.model, self.n_rollout_steps, seed_for(self.seed, index), index)


class RolloutActor(Actor):
    """Produces rollouts of ``n_rollout_steps`` steps of each of its environments.

    Consecutive rollouts overlap by one step: the observation that bootstraps one
    rollout is the first observation of the next, so no reward is left unlearned.
    """

    def __init__(
        self,
        envs: list[StructuredEnv],
        weights: WeightSource,
        model: ModelConfig,
        n_rollout_steps: int,
        seed: int,
        index: int = 0,
    ):
        self.envs = envs
        self.step_key = single_step_key(envs[0])
        self.obs_space = envs[0].observation_spaces_dict[self.step_key]
        self.act_space = envs[0].action_spaces_dict[self.step_key]
        self.policy = StructuredPolicy(envs[0].observation_spaces_dict, envs[0].action_spaces_dict, model)
        self.policy.requires_grad_(False)
        self.weights = weights
        self.version = weights.load_into(self.policy)
        self.n_steps = n_rollout_steps
        self.index = index
        self.generator = torch.Generator().manual_seed(seed)
        self.hub = EventHub()
        self.collector = EventCollector()
        self.hub.listeners.append(self.collector)
        self.episode_events = self.hub.publisher(EpisodeEvents)
        n = len(envs)
        self.current_obs = allocate(self.obs_space, (n,))
        for e, env in enumerate(envs):
            obs, _ = env.reset(seed=seed_for(seed, e))
            store(self.current_obs, e, obs)
        self.episode_return = np.zeros(n)
        self.episode_length = np.zeros(n, dtype=np.int64)

    def rollout(self) -> Rollout:
        if self.weights.version() != self.version:
            self.version = self.weights.load_into(self.policy)
        T, E = self.n_steps, len(self.envs)
        obs = allocate(self.obs_space, (T + 1, E))
        actions = allocate(self.act_space, (T, E))
        log_probs = np.zeros((T, E), dtype=np.float32)
        rewards = np.zeros((T, E), dtype=np.float32)
        terminated = np.zeros((T, E), dtype=bool)
        truncated = np.zeros((T, E), dtype=bool)
        trunc_obs: list[Mapping] = []
        trunc_index: list[tuple[int, int]] = []
        store(obs, 0, self.current_obs)
        obs_t = to_torch(obs)
        for t in range(T):
            action, log_prob = self.policy.act(
                self.step_key, {k: v[t] for k, v in obs_t.items()}, generator=self.generator
            )
            log_probs[t] = log_prob.numpy()
            for key, array in actions.items():
                array[t] = action[key].numpy()
            for e, env in enumerate(self.envs):
                next_obs, reward, term, trunc, _ = env.step({k: a[t, e] for k, a in actions.items()})
                rewards[t, e] = reward
                self.episode_return[e] += reward
                self.episode_length[e] += 1
                if term or trunc:
                    terminated[t, e], truncated[t, e] = term, trunc and not term
                    if truncated[t, e]:
                        trunc_obs.append(next_obs)
                        trunc_index.append((t, e))
                    self._end_episode(e)
                    next_obs, _ = env.reset()
                store(obs, (t + 1, e), next_obs)
        for key, array in self.current_obs.items():
            array[:] = obs[key][T]
        truncated_observations = allocate(self.obs_space, (len(trunc_obs),))
        for i, o in enumerate(trunc_obs):
            store(truncated_observations, i, o)
        trajectory = Trajectory(
            observations=obs,
            actions=actions,
            behaviour_log_probs=log_probs,
            rewards=rewards,
            terminated=terminated,
            truncated=truncated,
            truncated_observations=truncated_observations,
            truncated_index=np.asarray(trunc_index, dtype=np.int64).reshape(-1, 2),
        )
        return Rollout({self.step_key: trajectory}, self.version, self.index, T * E, self.collector.drain())

    def _end_episode(self, e: int) -> None:
        self.episode_events.episode_return(value=float(self.episode_return[e]))
        self.episode_events.episode_length(value=int(self.episode_length[e]))
        self.episode_return[e] = 0.0
        self.episode_length[e] = 0

    def close(self) -> None:
        for env in self.envs:
            env.close()
