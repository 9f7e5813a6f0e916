"""PettingZoo AEC and Parallel environments as structured envs.

Every agent becomes an actor. Agents that share their observation and action
spaces and a name prefix (``player_0``, ``player_1``) form one step key (``player``)
and share its policy by default; an agent with spaces of its own gets a step key of
its own (its name). Each agent's own rewards are credited to its latest decision
(:meth:`StructuredEnv.get_actor_rewards`), agents that are done leave with their own
termination or truncation, and PettingZoo's ``action_mask`` observation entry masks a
``Discrete`` action (it becomes ``action_mask`` next to the action ``action``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from maze_impala.core import ActorID, StepKey
from maze_impala.envs.gym_adapter import ACTION_KEY, OBS_KEY
from maze_impala.envs.spaces import within_bounds
from maze_impala.envs.structured import ActorExit, StructuredEnv


def _prefix(agent: str) -> str:
    head, _, tail = agent.rpartition("_")
    return head if head and tail.isdigit() else agent


GLOBAL_STATE = "global_state"
"""The observation key of what a centralised critic sees with ``global_state`` set: for
``model.critic_only_keys=[global_state]``."""
GLOBAL_STATES = ("state", "observations")
"""What ``global_state`` adds to every observation: the env's ``state()``, or every agent's observation
(flattened and joined in the order of ``possible_agents``; zeros for an agent that has none at the time), then a
presence flag per agent (1 while it observes, 0 once it has left)."""


def _global_state(value: bool | str | None) -> str | None:
    if value is True:
        return "state"
    if value is False or value is None or value in GLOBAL_STATES:
        return value or None
    raise ValueError(f"env.global_state must be false, true (state), state or observations, got {value!r}")


class _PettingZooBase(StructuredEnv):
    """Agent grouping, space wrapping and per-actor bookkeeping shared by both adapters."""

    def __init__(self, env: Any, global_state: bool | str = False):
        """``global_state``: add to every observation, as :data:`GLOBAL_STATE`, the env's ``state()`` (``true`` or
        ``state``) or every agent's observation (``observations``)."""
        self.env = env
        self.global_state = _global_state(global_state)
        if self.global_state == "state" and getattr(env, "state_space", None) is None:
            name = getattr(env, "metadata", {}).get("name", type(env).__name__)
            raise ValueError(
                f"env.global_state=true: {name} has no state() (no state_space); use "
                "env.global_state=observations (every agent's observation) or drop it"
            )
        agents = list(env.possible_agents)
        obs = {a: env.observation_space(a) for a in agents}
        act = {a: env.action_space(a) for a in agents}
        groups: dict[str, list[str]] = {}
        for agent in agents:
            groups.setdefault(_prefix(agent), []).append(agent)
        self.ids: dict[str, ActorID] = {}
        for prefix, members in groups.items():
            shared = all(obs[m] == obs[members[0]] and act[m] == act[members[0]] for m in members)
            for i, member in enumerate(members):
                self.ids[member] = ActorID(prefix, i) if shared else ActorID(member, 0)
        self._wrap_obs = {a: not isinstance(obs[a], gym.spaces.Dict) for a in agents}
        self._wrap_act = {a: not isinstance(act[a], gym.spaces.Dict) for a in agents}
        self._obs_spaces: dict[StepKey, gym.spaces.Dict] = {}
        self._act_spaces: dict[StepKey, gym.spaces.Dict] = {}
        self._counts: dict[StepKey, int] = {}
        self._agent_spaces, self._agent_actions = obs, act
        self._flat_sizes = {a: int(gym.spaces.flatdim(obs[a])) for a in agents}
        global_space = self._global_space() if self.global_state else None
        for agent, (key, _) in self.ids.items():
            space = dict({OBS_KEY: obs[agent]} if self._wrap_obs[agent] else obs[agent].spaces)
            if self.global_state:
                space[GLOBAL_STATE] = global_space
            self._obs_spaces[key] = gym.spaces.Dict(space)
            self._act_spaces[key] = gym.spaces.Dict({ACTION_KEY: act[agent]}) if self._wrap_act[agent] else act[agent]
            self._counts[key] = self._counts.get(key, 0) + 1
        self._time = 0
        self._rewards: dict[ActorID, float] = {}
        self._exits: dict[ActorID, ActorExit] = {}
        self._left: set[str] = set()
        self._truncated_episode = False

    @property
    def action_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        return self._act_spaces

    @property
    def game_name(self) -> str | None:
        """The PettingZoo env's name (its ``metadata["name"]``, e.g. ``connect_four_v3``), which a search opponent
        looks up its game by."""
        return getattr(self.env, "metadata", {}).get("name")

    @property
    def observation_spaces_dict(self) -> dict[StepKey, gym.spaces.Dict]:
        return self._obs_spaces

    @property
    def agent_counts_dict(self) -> dict[StepKey, int]:
        return self._counts

    @property
    def agents_dict(self) -> dict[str, ActorID]:
        return dict(self.ids)

    def get_env_time(self) -> int:
        return self._time

    def get_actor_rewards(self) -> dict[ActorID, float]:
        return self._rewards

    def get_actor_exits(self) -> dict[ActorID, ActorExit]:
        return self._exits

    def render(self) -> Any:
        """The PettingZoo env's ``render()`` (a frame where it was made with ``render_mode="rgb_array"``)."""
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def _wrap(self, agent: str, obs: Any) -> dict:
        own = {OBS_KEY: obs} if self._wrap_obs[agent] else obs
        if not self.global_state:
            return own
        if self.global_state == "state":
            return {**own, GLOBAL_STATE: self._state()}
        return {**own, GLOBAL_STATE: self.joint_observation(self._current_observations())}

    def joint_observation(self, observations: Mapping[str, Any]) -> np.ndarray:
        """``global_state=observations``: every agent's observation in ``observations`` (PettingZoo's, by agent
        name), flattened and joined in the order of ``possible_agents``, zeros for an agent without one; then one
        flag per agent, 1 where it has an observation and 0 where not. The flags tell a critic an agent that has
        left from one that observes zeros (normalised, the zeros are an arbitrary point of its input); where every
        agent always observes (MPE) they are constant, and the observation normaliser maps them to 0."""
        joint = [
            gym.spaces.flatten(self._agent_spaces[a], observations[a]) if a in observations else np.zeros(n)
            for a, n in self._flat_sizes.items()
        ]
        present = np.array([a in observations for a in self._flat_sizes], dtype=np.float32)
        return np.concatenate([*joint, present]).astype(np.float32)

    def _state(self) -> np.ndarray:
        try:
            return self.env.state()
        except Exception as error:  # an env's own state() bug, named with the setting that avoids it
            name = getattr(self.env, "metadata", {}).get("name", type(self.env).__name__)
            raise RuntimeError(
                f"env.global_state=state: {name}.state() failed ({type(error).__name__}: {error})"
                f"{f' with {sorted(self._left)} out of the episode' if self._left else ''}; use "
                "env.global_state=observations (every agent's observation, zeros for one that has left)"
            ) from error

    def _global_space(self) -> gym.Space:
        if self.global_state == "state":
            return self.env.state_space
        flat = [gym.spaces.flatten_space(self._agent_spaces[a]) for a in self._flat_sizes]
        low = np.concatenate([*(f.low for f in flat), np.zeros(len(flat))]).astype(np.float32)  # then the flags
        high = np.concatenate([*(f.high for f in flat), np.ones(len(flat))]).astype(np.float32)
        return gym.spaces.Box(np.minimum(low, 0), np.maximum(high, 0), dtype=np.float32)

    def _current_observations(self) -> dict[str, Any]:
        """Every live agent's observation now (``global_state=observations``)."""
        raise NotImplementedError

    def _unwrap(self, agent: str, action: dict) -> Any:
        return within_bounds(self._agent_actions[agent], action[ACTION_KEY] if self._wrap_act[agent] else action)

    def _new_sub_step(self) -> None:
        self._rewards, self._exits = {}, {}

    def _leave(self, agent: str, truncated: bool, final_obs: Any | None) -> None:
        """Report ``agent`` as done (once); a truncated agent bootstraps from its final observation."""
        if agent in self._left:
            return
        self._left.add(agent)
        self._truncated_episode |= truncated
        observation = self._wrap(agent, final_obs) if truncated and final_obs is not None else None
        self._exits[self.ids[agent]] = ActorExit(truncated, observation)

    def _reset_bookkeeping(self) -> None:
        self._time, self._left, self._truncated_episode = 0, set(), False
        self._new_sub_step()


class PettingZooAECEnv(_PettingZooBase):
    """An AEC env: agents act in turn; a structured step is one agent's move."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.env.reset(seed=seed, options=options)
        self._reset_bookkeeping()
        self._skip_done_agents()
        return self._observation(), {}

    def actor_id(self) -> ActorID:
        return self.ids[self.env.agent_selection]

    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        self._new_sub_step()
        agent = self.env.agent_selection
        self.env.step(self._unwrap(agent, action))
        self._time += 1
        self._rewards = {self.ids[a]: float(r) for a, r in self.env.rewards.items()}
        env = self.env
        ending = all(env.terminations[a] or env.truncations[a] for a in env.agents)
        # the episode's final observation of the agent that acted, taken before the done agents leave: some envs
        # (hanabi) can no longer observe an agent that has left
        final = self._observation(agent) if ending and agent in env.agents else None
        self._skip_done_agents()
        if self.env.agents:
            return self._observation(), sum(self._rewards.values()), False, False, {}
        truncated = self._truncated_episode
        if final is None:
            final = self._observation(agent)
        return final, sum(self._rewards.values()), not truncated, truncated, {}

    def _skip_done_agents(self) -> None:
        """Report every agent that is done, and step the done agents PettingZoo still selects."""
        env = self.env
        for agent in env.agents:
            if env.terminations[agent] or env.truncations[agent]:
                truncated = bool(env.truncations[agent]) and not env.terminations[agent]
                self._leave(agent, truncated, env.observe(agent) if truncated else None)
        while env.agents and (env.terminations[env.agent_selection] or env.truncations[env.agent_selection]):
            env.step(None)

    def _observation(self, agent: str | None = None) -> dict:
        agent = agent or self.env.agent_selection
        return self._wrap(agent, self.env.observe(agent))

    def _current_observations(self) -> dict[str, Any]:
        return {a: self.env.observe(a) for a in self.env.agents}


class PettingZooParallelEnv(_PettingZooBase):
    """A Parallel env: a structured step is every live agent acting once, in order, then one env step."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self._obs, _ = self.env.reset(seed=seed, options=options)
        self._reset_bookkeeping()
        self._queue, self._actions = list(self.env.agents), {}
        self._last = self._queue[0]
        return self._wrap(self._queue[0], self._obs[self._queue[0]]), {}

    def actor_id(self) -> ActorID:
        return self.ids[self._queue[0] if self._queue else self._last]

    def _current_observations(self) -> dict[str, Any]:
        return self._obs

    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        self._new_sub_step()
        agent = self._last = self._queue.pop(0)
        self._actions[agent] = self._unwrap(agent, action)
        if self._queue:
            return self._wrap(self._queue[0], self._obs[self._queue[0]]), 0.0, False, False, {}
        obs, rewards, terminations, truncations, _ = self.env.step(self._actions)
        self._time += 1
        self._obs, self._actions = obs, {}
        self._rewards = {self.ids[a]: float(r) for a, r in rewards.items()}
        for a in rewards:
            if terminations.get(a) or truncations.get(a):
                truncated = bool(truncations.get(a)) and not terminations.get(a)
                self._leave(a, truncated, obs.get(a))
        self._queue = [a for a in self.env.agents if a not in self._left]
        reward = sum(self._rewards.values())
        if self._queue:
            return self._wrap(self._queue[0], obs[self._queue[0]]), reward, False, False, {}
        truncated = self._truncated_episode
        return self._wrap(agent, obs.get(agent, self._obs.get(agent))), reward, not truncated, truncated, {}


def make_pettingzoo_env(name: str, api: str = "aec", global_state: bool | str = False, **kwargs: Any) -> StructuredEnv:
    """``env=pettingzoo env.name=<module>``: e.g. ``pettingzoo.classic.tictactoe_v3`` (``env.api=aec|parallel``).

    The module's ``env(**kwargs)`` (AEC) or ``parallel_env(**kwargs)`` is called. ``global_state``: every
    observation also holds, as key ``global_state``, the env's ``state()`` (``true`` or ``state``) or every agent's
    observation (``observations``), for a centralised critic.
    """
    _global_state(global_state)  # a bad value fails before the env is built
    if api not in ("aec", "parallel"):
        raise ValueError(f"env.api must be aec or parallel, got {api!r}")
    try:
        module = importlib.import_module(name)
    except ImportError as error:
        parts = name.split(".")
        family = parts[1] if len(parts) > 2 and parts[0] == "pettingzoo" else None
        extra = (
            f"pip install 'pettingzoo[{family}]'" if family else "pip install 'pettingzoo[classic]', or mpe2 for MPE"
        )
        raise ValueError(
            f"cannot import the PettingZoo env module {name!r} ({error}). Give its module path, e.g. "
            f"pettingzoo.classic.rps_v2, and install its extra ({extra})"
        ) from error
    factory = getattr(module, "env" if api == "aec" else "parallel_env", None)
    if factory is None:
        raise ValueError(f"{name} has no {'env' if api == 'aec' else 'parallel_env'}() function; try env.api=aec")
    env = factory(**kwargs)
    return PettingZooAECEnv(env, global_state) if api == "aec" else PettingZooParallelEnv(env, global_state)
