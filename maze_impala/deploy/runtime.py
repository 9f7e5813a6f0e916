"""A deployed policy: an exported folder (see :mod:`maze_impala.deploy`) loaded and acting, with numpy and either
onnxruntime (``backend: onnx``) or numpy alone (``backend: numpy``). Neither torch, Hydra nor Gymnasium is imported.

The graph of each step key maps observations (and the recurrent state) to masked logits (and the next state);
actions are drawn from the logits here, head by head: the most likely ones, or sampled from a numpy generator.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from maze_impala.deploy.spaces import action_value, check_observation, dtype_of, shape_of

MANIFEST = "manifest.json"
FORMAT = "maze_impala.deploy/1"
State = dict[str, np.ndarray]
Actions = dict[str, np.ndarray]
Forward = Callable[[dict[str, np.ndarray], State, np.ndarray], tuple[np.ndarray, State]]
"""A step key's graph: ``(observations [B, ...], state [B, ...], agent ids [B]) -> (logits [B, L], next state)``."""


class DeployError(ValueError):
    """A folder that is no exported policy, or one this runtime cannot run."""


def _onnx(folder: Path, step: dict[str, Any]) -> Forward:
    try:
        import onnxruntime as ort
    except ImportError:
        raise DeployError(
            f"{folder} holds ONNX graphs, and onnxruntime is not installed: pip install onnxruntime "
            "(or export with format=numpy, for a policy that has a numpy form)"
        ) from None
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = 1, 1  # one decision: threads cost more than win
    session = ort.InferenceSession(str(folder / step["file"]), options, providers=["CPUExecutionProvider"])
    obs_names, state_names = step["inputs"], list(step["state"])
    outputs = ["logits", *(f"next_{name}" for name in state_names)]
    graph_inputs = {i.name for i in session.get_inputs()}  # the exporter drops what the graph never reads
    obs_inputs = [(f"obs_{i}", name) for i, name in enumerate(obs_names) if f"obs_{i}" in graph_inputs]
    with_ids = "agent_ids" in graph_inputs

    def forward(obs: dict[str, np.ndarray], state: State, agent_ids: np.ndarray) -> tuple[np.ndarray, State]:
        feed = {graph_name: obs[name] for graph_name, name in obs_inputs}
        if with_ids:
            feed["agent_ids"] = agent_ids
        feed.update({f"state_{name}": state[name] for name in state_names})
        logits, *next_state = session.run(outputs, feed)
        return logits, dict(zip(state_names, next_state))

    return forward


def _numpy(folder: Path, manifest: dict[str, Any]) -> dict[Any, Forward]:
    from maze_impala.deploy.numpy_form import load_numpy_acting

    acting = load_numpy_acting(folder)

    def forward_of(key: Any) -> Forward:
        return lambda obs, state, agent_ids: acting.logits(key, obs, state)

    return {step["step_key"]: forward_of(step["step_key"]) for step in manifest["step_keys"]}


class _Step:
    """One step key, prepared for fast decisions: its checks, graph, heads and starting state."""

    def __init__(self, step: dict[str, Any], forward: Forward):
        self.step, self.key, self.forward = step, step["step_key"], forward
        self.space, self.heads, self.masks = step["observation_space"], step["heads"], dict(step["masks"])
        self.spec = [(name, shape_of(sub), dtype_of(sub)) for name, sub in self.space["spaces"].items()]
        self.action_spaces = step["action_space"]["spaces"]
        self.zero = {name: np.zeros((1, *shape), np.float32) for name, shape in step["state"].items()}
        self.ids = [np.array([agent], np.int64) for agent in range(256)]
        discrete = all(h["kind"] == "categorical" and h["squeeze"] for h in self.heads)
        self.argmax = [(h["key"], h["offset"], h["offset"] + h["size"]) for h in self.heads] if discrete else None
        """Where every head is one Discrete action: its key and the slice of its logits (the greedy fast path)."""

    def one(self, observation: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """One observation as a batch of one row, checked against the space (the slow, explaining way on a miss)."""
        try:
            out = {}
            for name, shape, dtype in self.spec:
                value = np.asarray(observation[name], dtype)
                if value.shape != shape:
                    raise ValueError
                out[name] = value[None]
            return out
        except (KeyError, ValueError, TypeError):
            return check_observation(dict(observation), self.space, self.key, None)

    def check_masks(self, obs: dict[str, np.ndarray]) -> None:
        for key, mask in self.masks.items():  # the graph masks; a mask that allows nothing is the env's bug
            if not (obs[mask] > 0.5).any(-1).all():
                raise ValueError(
                    f"step key {self.key!r}: observation {mask!r} masks every action of {key!r}; "
                    "an env must leave at least one action allowed"
                )

    def decide(self, logits: np.ndarray, rng: np.random.Generator | None) -> dict[str, Any]:
        """One row's actions as the env takes them."""
        if rng is None and self.argmax is not None:
            row = logits[0]
            return {key: int(row[start:end].argmax()) for key, start, end in self.argmax}
        actions = sample(self.heads, logits, rng)
        return {key: action_value(value[0], self.action_spaces[key]) for key, value in actions.items()}


class DeployedPolicy:
    """An exported policy, acting one decision or a batch at a time.

    ``policy = DeployedPolicy.load(folder)``; then, for the actor the env names (a step key, an ``(step key, agent)``
    pair or an agent's name): ``action, state = policy.act(observation, env.actor_id(), state)``. ``state`` is the
    recurrent state of that actor (None at the start of an episode; a feed-forward policy returns an empty one).
    """

    def __init__(self, folder: Path, manifest: dict[str, Any], forwards: dict[Any, Forward]):
        self.folder, self.manifest = folder, manifest
        self.steps = {step["step_key"]: step for step in manifest["step_keys"]}
        self._steps = {key: _Step(step, forwards[key]) for key, step in self.steps.items()}
        self.agents = {name: tuple(actor) for name, actor in manifest.get("agents", {}).items()}
        """The env's agents by name, each with its (step key, agent id)."""

    @classmethod
    def load(cls, folder: str | Path) -> DeployedPolicy:
        folder = Path(folder)
        path = folder / MANIFEST
        if not path.is_file():
            raise DeployError(
                f"{folder} is no exported policy: it has no {MANIFEST} (export one with maze-run -cn "
                "conf_export input_dir=<a training run>)"
            )
        manifest = json.loads(path.read_text())
        if manifest.get("format") != FORMAT:
            raise DeployError(f"{path} is of format {manifest.get('format')!r}; this runtime reads {FORMAT!r}")
        if manifest["backend"] == "onnx":
            forwards = {step["step_key"]: _onnx(folder, step) for step in manifest["step_keys"]}
        elif manifest["backend"] == "numpy":
            forwards = _numpy(folder, manifest)
        else:
            raise DeployError(f"{path}: unknown backend {manifest['backend']!r} (onnx or numpy)")
        return cls(folder, manifest, forwards)

    @property
    def step_keys(self) -> list[Any]:
        return list(self.steps)

    def initial_state(self, step_key: Any, batch: int = 1) -> State:
        """Zeros: the state an episode starts from, ``[batch, ...]`` per name."""
        return {name: np.zeros((batch, *shape), np.float32) for name, shape in self.steps[step_key]["state"].items()}

    def _actor(self, who: Any) -> tuple[Any, int]:
        if isinstance(who, tuple) and len(who) == 2:
            return who[0], int(who[1])
        if who in self.steps:
            return who, 0
        if isinstance(who, str) and who in self.agents:
            return self.agents[who]
        raise KeyError(
            f"{who!r} is neither a step key of this policy ({self.step_keys}) nor an agent ({sorted(self.agents)})"
        )

    def logits(
        self, observations: Mapping[str, Any], step_key: Any, state: State | None = None, agent_ids: Any = None
    ) -> tuple[np.ndarray, State]:
        """The masked logits ``[B, L]`` of a batch of ``[B, ...]`` observations of ``step_key``, and the next state."""
        step = self._steps[step_key]
        batch = len(np.asarray(next(iter(observations.values()))))
        obs = check_observation(dict(observations), step.space, step_key, batch)
        state = self.initial_state(step_key, batch) if not state else state
        ids = np.zeros(batch, np.int64) if agent_ids is None else np.asarray(agent_ids, np.int64).reshape(batch)
        logits, state = step.forward(obs, state, ids)
        step.check_masks(obs)
        return logits, state

    def act_batch(
        self,
        observations: Mapping[str, Any],
        step_key: Any,
        state: State | None = None,
        agent_ids: Any = None,
        rng: np.random.Generator | None = None,
    ) -> tuple[Actions, State]:
        """Actions ``[B, ...]`` per action key for a batch of observations of ``step_key``: the most likely ones, or
        sampled from ``rng``; and the next state."""
        logits, state = self.logits(observations, step_key, state, agent_ids)
        return sample(self._steps[step_key].heads, logits, rng), state

    def act(
        self,
        observation: Mapping[str, Any],
        who: Any,
        state: State | None = None,
        rng: np.random.Generator | None = None,
    ) -> tuple[dict[str, Any], State]:
        """One decision of ``who`` (a step key, ``(step key, agent)`` or an agent's name) on one observation: the
        action as the env takes it (per action key), and that actor's next state (None or ``{}`` to start)."""
        step_key, agent = self._actor(who)
        step = self._steps[step_key]
        obs = step.one(observation)
        ids = step.ids[agent] if agent < len(step.ids) else np.array([agent], np.int64)
        logits, state = step.forward(obs, state or step.zero, ids)
        if step.masks:
            step.check_masks(obs)
        return step.decide(logits, rng), state


def sample(heads: list[dict[str, Any]], logits: np.ndarray, rng: np.random.Generator | None) -> dict[str, np.ndarray]:
    """Each head's actions from its part of the logits: the most likely (``rng`` None), or drawn from ``rng``."""
    actions: dict[str, np.ndarray] = {}
    for head in heads:
        part = logits[:, head["offset"] : head["offset"] + head["size"]].astype(np.float64)
        if head["kind"] == "categorical":
            chosen, offset = [], 0
            for n in head["nvec"]:
                z = part[:, offset : offset + n]
                if rng is None:
                    chosen.append(z.argmax(-1))
                else:
                    p = np.exp(z - z.max(-1, keepdims=True))
                    cdf = p.cumsum(-1)
                    u = rng.random(len(z))[:, None] * cdf[:, -1:]
                    chosen.append(np.minimum((cdf <= u).sum(-1), n - 1))
                offset += n
            actions[head["key"]] = chosen[0] if head["squeeze"] else np.stack(chosen, axis=-1)
        elif head["kind"] == "bernoulli":
            if rng is None:
                actions[head["key"]] = (part > 0).astype(np.int8)
            else:
                actions[head["key"]] = (rng.random(part.shape) < 1.0 / (1.0 + np.exp(-part))).astype(np.int8)
        else:  # gaussian: the mean, or a draw around it
            action = part if rng is None else part + rng.standard_normal(part.shape) * np.exp(head["log_std"])
            if "squash" in head:  # model.action_bounds=squash: into the Box's bounds
                action = np.asarray(head["squash"]["center"]) + np.asarray(head["squash"]["half_width"]) * np.tanh(
                    action
                )
            actions[head["key"]] = action.astype(np.float32).reshape(len(part), *head["shape"])
    return actions
