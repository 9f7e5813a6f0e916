"""Small deterministic environments for tests; importable by spawned actor processes."""

from __future__ import annotations

import os
import signal
from typing import Any

import gymnasium as gym
import numpy as np
from pettingzoo import ParallelEnv

from maze_impala.core import ActorID
from maze_impala.envs.structured import StructuredEnv


class CounterEnv(gym.Env):
    """Observation = [step count, episode id]; reward = 1 + action; truncated after ``limit`` steps.

    Everything is a known function of the step count, so tests can check exactly what
    actors record: observations, overlap between rollouts, rewards and truncation.
    """

    def __init__(self, limit: int = 5, terminate_at: int | None = None):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.limit, self.terminate_at = limit, terminate_at
        self.t, self.episode = 0, -1

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.episode], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t, self.episode = 0, self.episode + 1
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        truncated = not terminated and self.t >= self.limit
        return self._obs(), 1.0 + float(action), terminated, truncated, {}


class EndlessEnv(CounterEnv):
    """A :class:`CounterEnv` that never terminates or truncates, and has no time limit of its own (as MinAtar's games
    have none): only the run's ``max_episode_steps`` ends its episodes."""

    def __init__(self) -> None:
        super().__init__(limit=2**62)


class InterruptedEnv(CounterEnv):
    """Raises ``KeyboardInterrupt`` (as Ctrl-C does) at its ``at``-th reset: ``at - 1`` episodes of it end first."""

    def __init__(self, at: int = 3):
        super().__init__(limit=5)
        self.at, self.resets = at, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        self.resets += 1
        if self.resets == self.at:
            raise KeyboardInterrupt
        return super().reset(seed=seed, options=options)


class CrashingEnv(CounterEnv):
    """Raises in ``step`` after ``crash_after`` steps: an actor that fails with an exception."""

    def __init__(self, crash_after: int = 50):
        super().__init__(limit=10)
        self.crash_after, self.steps = crash_after, 0

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        if self.steps > self.crash_after:
            raise RuntimeError("CrashingEnv: simulated failure in env.step")
        return super().step(action)


class DyingEnv(CrashingEnv):
    """Kills its own process with SIGKILL after ``crash_after`` steps: an actor that dies silently."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.steps += 1
        if self.steps > self.crash_after:
            os.kill(os.getpid(), signal.SIGKILL)
        return CounterEnv.step(self, action)


class BrokenEnv(CounterEnv):
    """Raises in ``__init__``: an env that cannot be built (a missing licence, a simulator that will not start)."""

    def __init__(self) -> None:
        raise RuntimeError("BrokenEnv: the simulator would not start")


class FaultyEnv(CounterEnv):
    """A :class:`CounterEnv` that breaks its contract from step ``after`` on (counted over all episodes).

    ``fault``: ``shape`` (an observation of shape (1,) where (2,) is declared), ``nan_reward``,
    ``nan_obs``, or ``old_api`` (Gym's 4-tuple ``step``).
    """

    def __init__(self, fault: str, after: int = 0, limit: int = 5):
        super().__init__(limit=limit)
        self.fault, self.after, self.steps = fault, after, 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, 0], dtype=np.float32)  # the same first observation for the same seed

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        if self.steps <= self.after:
            return obs, reward, terminated, truncated, info
        if self.fault == "shape":
            obs = obs[:1]
        elif self.fault == "nan_reward":
            reward = float("nan")
        elif self.fault == "nan_obs":
            obs = np.full_like(obs, np.nan)
        elif self.fault == "old_api":
            return obs, reward, terminated or truncated, info
        return obs, reward, terminated, truncated, info


class LivesEnv(gym.Env):
    """A game of ``lives`` lives of ``life_length`` steps each, reported in ``info["lives"]`` as Atari envs do;
    observation = [step count, lives left], reward 1 per step."""

    def __init__(self, lives: int = 3, life_length: int = 4):
        self.observation_space = gym.spaces.Box(0, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.max_lives, self.life_length = lives, life_length
        self.t, self.lives = 0, lives

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.lives], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t, self.lives = 0, self.max_lives
        return self._obs(), {"lives": self.lives}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        if self.t % self.life_length == 0:
            self.lives -= 1
        return self._obs(), 1.0, self.lives == 0, False, {"lives": self.lives}


def lives_env(episodic_life: bool = True) -> StructuredEnv:
    """:class:`LivesEnv` through the Gymnasium adapter, a lost life ending the learner's episode."""
    from maze_impala.envs.gym_adapter import GymStructuredEnv

    return GymStructuredEnv(LivesEnv(), episodic_life=episodic_life)


class TwoStepEnv(StructuredEnv):
    """Structured steps of two sub-steps, ``"a"`` then ``"b"``, with known rewards.

    Observation ``[structured step, episode, sub-step]``. ``"a"`` returns reward 0.5,
    ``"b"`` returns ``1 + action``; an episode has ``n_steps`` structured steps, or ends
    right after ``"a"`` (mid-step) in structured step ``end_mid_step_at``. With
    ``split_rewards`` the env gives per-actor rewards after ``"b"``: 2.0 to ``"a"`` and
    ``10 + action`` to ``"b"`` (and nothing after ``"a"``).
    """

    def __init__(self, n_steps: int = 3, end_mid_step_at: int | None = None, split_rewards: bool = False):
        box = gym.spaces.Box(-np.inf, np.inf, shape=(3,), dtype=np.float32)
        self._obs_spaces = {k: gym.spaces.Dict({"x": box}) for k in ("a", "b")}
        self._act_spaces = {k: gym.spaces.Dict({"u": gym.spaces.Discrete(2)}) for k in ("a", "b")}
        self.n_steps, self.end_mid_step_at, self.split_rewards = n_steps, end_mid_step_at, split_rewards
        self.time, self.episode, self.key = 0, -1, "a"
        self._actor_rewards: dict[ActorID, float] | None = None

    @property
    def action_spaces_dict(self) -> dict:
        return self._act_spaces

    @property
    def observation_spaces_dict(self) -> dict:
        return self._obs_spaces

    @property
    def agent_counts_dict(self) -> dict:
        return {"a": 1, "b": 1}

    def actor_id(self) -> ActorID:
        return ActorID(self.key, 0)

    def get_env_time(self) -> int:
        return self.time

    def get_actor_rewards(self) -> dict[ActorID, float] | None:
        return self._actor_rewards

    def _obs(self) -> dict:
        return {"x": np.array([self.time, self.episode, 0 if self.key == "a" else 1], dtype=np.float32)}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.time, self.episode, self.key = 0, self.episode + 1, "a"
        return self._obs(), {}

    def step(self, action: dict) -> tuple[dict, float, bool, bool, dict]:
        u = int(action["u"])
        if self.key == "a":
            self.key = "b"
            self._actor_rewards = {} if self.split_rewards else None
            return self._obs(), 0.5, self.time == self.end_mid_step_at, False, {}
        self._actor_rewards = {ActorID("a", 0): 2.0, ActorID("b", 0): 10.0 + u} if self.split_rewards else None
        self.time, self.key = self.time + 1, "a"
        return self._obs(), 1.0 + u, self.time >= self.n_steps, False, {}


class LeavingAgentsEnv(ParallelEnv):
    """A PettingZoo Parallel env whose agents leave one by one.

    Agent ``walker_i`` observes ``[t, i]`` and earns ``1 + i`` per step. ``walker_0`` is
    terminated after 2 steps and ``walker_1`` after 3; ``walker_2`` is truncated after 4,
    which ends the episode.
    """

    metadata = {"name": "leaving_agents_v0"}

    def __init__(self) -> None:
        self.possible_agents = [f"walker_{i}" for i in range(3)]
        self.agents: list[str] = []
        self.t = 0

    def observation_space(self, agent: str) -> gym.Space:
        return gym.spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)

    def action_space(self, agent: str) -> gym.Space:
        return gym.spaces.Discrete(2)

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.t, self.possible_agents.index(agent)], dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents, self.t = list(self.possible_agents), 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: 1.0 + self.possible_agents.index(a) for a in self.agents}
        terminations = {a: (a == "walker_0" and self.t >= 2) or (a == "walker_1" and self.t >= 3) for a in self.agents}
        truncations = {a: a == "walker_2" and self.t >= 4 for a in self.agents}
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        return obs, rewards, terminations, truncations, infos


def leaving_agents_parallel() -> StructuredEnv:
    from maze_impala.envs.pettingzoo_adapter import PettingZooParallelEnv

    return PettingZooParallelEnv(LeavingAgentsEnv())


def leaving_agents_aec() -> StructuredEnv:
    from pettingzoo.utils.conversions import parallel_to_aec

    from maze_impala.envs.pettingzoo_adapter import PettingZooAECEnv

    return PettingZooAECEnv(parallel_to_aec(LeavingAgentsEnv()))


def read_weights_forever(weights: Any, model: Any, ready: Any) -> None:
    """A process that does nothing but load shared weights, to be killed in the middle of a read."""
    from maze_impala.envs.factory import make_env
    from maze_impala.nn.flat import load_flat
    from maze_impala.nn.models import make_policy

    policy = make_policy(make_env("CartPole-v1"), model)
    ready.set()
    while True:
        load_flat(policy, weights.read()[0])


def pool_a_new_actor_plays(spec: Any, weights: Any, answer: Any = None) -> list[int]:
    """The versions of the snapshot pool that a new actor of ``spec`` (what a restart builds) plays against after
    one rollout; put on ``answer`` (a queue) where it runs as a process of its own, as an actor process does."""
    from maze_impala.play.lineup import OPPONENT

    actor = spec.build(0, weights)
    try:
        actor.rollout()
        versions = list(actor.acting.policies[OPPONENT].versions)
    finally:
        actor.close()
    if answer is not None:
        answer.put(versions)
    return versions


class OddKeysEnv(StructuredEnv):
    """Two sub-steps whose step keys, observation keys and action keys are names torch modules cannot take as
    they are (``type``, ``train``, ``a.b``, ...): the model must map them to safe names."""

    def __init__(self, keys: tuple[str, str] = ("type", "a.b")):
        self.keys = list(keys)
        box = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        self._obs_spaces = {k: gym.spaces.Dict({"train": box, "x.y": gym.spaces.Discrete(3)}) for k in self.keys}
        self._act_spaces = {k: gym.spaces.Dict({"type": gym.spaces.Discrete(2), "keys": box}) for k in self.keys}
        self.time, self.index = 0, 0

    @property
    def action_spaces_dict(self) -> dict:
        return self._act_spaces

    @property
    def observation_spaces_dict(self) -> dict:
        return self._obs_spaces

    @property
    def agent_counts_dict(self) -> dict:
        return {k: 1 for k in self.keys}

    def actor_id(self) -> ActorID:
        return ActorID(self.keys[self.index], 0)

    def get_env_time(self) -> int:
        return self.time

    def _obs(self) -> dict:
        return {"train": np.array([self.time / 5, self.index], dtype=np.float32), "x.y": self.time % 3}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.time, self.index = 0, 0
        return self._obs(), {}

    def step(self, action: dict) -> tuple[dict, float, bool, bool, dict]:
        reward = float(action["type"]) - float(np.abs(np.asarray(action["keys"])).sum())
        self.index = (self.index + 1) % len(self.keys)
        if self.index == 0:
            self.time += 1
        return self._obs(), reward, self.time >= 5, False, {}


def fft_net(observation_space: Any, n_outputs: int) -> Any:
    """A policy network of a user's (``model.networks``) with an op that ONNX lacks (a real FFT): what the export
    must refuse, naming the network and the op."""
    import torch

    class FftNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            size = sum(int(np.prod(space.shape)) for space in observation_space.spaces.values())
            self.linear = torch.nn.Linear(size // 2 + 1, n_outputs)

        def forward(self, obs: dict) -> Any:
            x = torch.cat([v.float().flatten(1) for v in obs.values()], dim=-1)
            return self.linear(torch.fft.rfft(x).abs())

    return FftNet()
