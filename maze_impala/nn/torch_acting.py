"""Acting through torch, and the choice between torch and a policy's own numpy form.

:func:`numpy_form_of` is where a policy's numpy form is accepted: the policy exports it
(:meth:`~maze_impala.nn.models.StructuredPolicy.numpy_form`, which reads every parameter and buffer), and it must
act as the torch module does on sampled observations (a subclass that changes how the module computes fails
this, and acts in torch). :func:`make_acting` then gives the numpy acting where the form holds, torch otherwise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import gymnasium as gym
import numpy as np
import torch

from maze_impala.core import ActorID, NestedArrays, StepKey
from maze_impala.envs.spaces import MASK_SUFFIX, storage_dtype
from maze_impala.nn.acting import Acting, Actions, Noise, State, StreamNoise
from maze_impala.nn.flat import flatten, load_flat
from maze_impala.nn.models import StructuredPolicy
from maze_impala.nn.numpy_acting import NumpyActing
from maze_impala.nn.numpy_forms import NumpyPolicyForm

ACTING_BACKENDS = ("auto", "numpy", "torch")
log = logging.getLogger("maze_impala")


class TorchActing(Acting):
    """The policy's own :meth:`StructuredPolicy.act`; works for every policy (on the policy's device)."""

    def __init__(self, policy: StructuredPolicy):
        self.policy = policy
        self.device = next(policy.parameters(), torch.zeros(0)).device

    def state_shapes(self, step_key: StepKey) -> dict[str, tuple[int, ...]]:
        return self.policy.state_shapes(step_key)

    def load(self, flat: np.ndarray) -> None:
        load_flat(self.policy, flat)

    def act(
        self, step_key: StepKey, obs: NestedArrays, state: State, agent_ids: np.ndarray, noise: Noise | None
    ) -> Actions:
        device = self.device
        tensors = {k: torch.as_tensor(v, device=device) for k, v in obs.items()}
        states = {k: torch.as_tensor(v, device=device) for k, v in state.items()}
        agents = torch.as_tensor(agent_ids, device=device)
        actions, log_probs, states = self.policy.act(step_key, tensors, states, agents, noise)
        next_state = {k: v.cpu().numpy() for k, v in states.items()}
        return {k: a.cpu().numpy() for k, a in actions.items()}, log_probs.cpu().numpy(), next_state


def _sample_observations(space: gym.spaces.Dict, n: int, seed: int) -> NestedArrays:
    """``n`` observations of ``space`` (masks allowing every action), stacked."""
    space.seed(seed)
    rows = [space.sample() for _ in range(n)]
    obs = {k: np.stack([np.asarray(r[k]) for r in rows]).astype(storage_dtype(s)) for k, s in space.spaces.items()}
    for key in obs:
        if key.endswith(MASK_SUFFIX):
            obs[key] = np.ones_like(obs[key])
    return obs


def parity_error(policy: StructuredPolicy, acting: Acting, rows: int = 8, seed: int = 0) -> str | None:
    """Where ``acting`` acts differently from ``policy`` itself on sampled observations (two steps, so that a
    recurrent state is carried once), or None."""
    reference = TorchActing(policy)
    for key, space in policy.observation_spaces.items():
        obs = _sample_observations(space, rows, seed)
        agents = np.zeros(rows, dtype=np.int64)
        state: dict[int, State] = {0: {}, 1: {}}
        for name, shape in policy.state_shapes(key).items():
            state[0][name] = state[1][name] = np.zeros((rows, *shape), dtype=np.float32)
        for step in range(2):
            results = [
                impl.act(key, obs, state[i], agents, StreamNoise(seed + step))
                for i, impl in enumerate((reference, acting))
            ]
            (ref_actions, ref_lp, ref_state), (actions, lp, new_state) = results
            if any(not np.allclose(a, actions[k], rtol=1e-3, atol=1e-3) for k, a in ref_actions.items()):
                return f"step key {key!r}: actions differ"
            if not np.allclose(ref_lp, lp, rtol=1e-3, atol=1e-3):
                return f"step key {key!r}: log-probabilities differ ({ref_lp[:3]} vs {lp[:3]})"
            for name, value in ref_state.items():
                if not np.allclose(value, new_state[name], rtol=1e-3, atol=1e-4):
                    return f"step key {key!r}: recurrent state {name!r} differs"
            state = {0: ref_state, 1: new_state}
    return None


def numpy_form_of(policy: StructuredPolicy) -> NumpyPolicyForm | None:
    """``policy``'s numpy form where it has one that acts as the policy does; None (act in torch) otherwise."""
    form = policy.numpy_form()
    if form is None:
        return None
    acting = NumpyActing(form)
    acting.load(flatten(policy).numpy())
    error = parity_error(policy, acting)
    if error is not None:
        log.warning(
            "%s exports a numpy form that acts differently (%s): it acts in torch", type(policy).__name__, error
        )
        return None
    return form


def make_acting(policy: StructuredPolicy, backend: str = "auto") -> Acting:
    """An acting for ``policy`` with its current weights: ``auto``, its numpy form where it has one
    (:func:`numpy_form_of`), torch otherwise; ``numpy`` or ``torch`` to choose."""
    if backend not in ACTING_BACKENDS:
        raise ValueError(f"acting backend must be one of {ACTING_BACKENDS}, got {backend!r}")
    form = numpy_form_of(policy) if backend != "torch" else None
    if backend == "numpy" and form is None:
        raise ValueError(f"{type(policy).__name__} has no numpy form that acts as it does; use the torch backend")
    if form is None:
        return TorchActing(policy)
    acting = NumpyActing(form)
    acting.load(flatten(policy).numpy())
    return acting


class Player:
    """Acts for one env, one observation at a time (``load_policy`` users), keeping each actor's recurrent state
    between calls; :meth:`reset` at the start of every episode."""

    def __init__(
        self,
        policy: StructuredPolicy,
        deterministic: bool = True,
        seed: int = 0,
        backend: str = "auto",
        acting: Acting | None = None,
    ):
        """``backend``: how it acts (:func:`make_acting`): in numpy where the policy has a numpy form (``auto``), or
        ``torch`` or ``numpy``. ``acting``: what decides instead of the policy's own acting, for the policy's
        spaces (a search guided by it: :func:`maze_impala.play.guided.searching_player`)."""
        self.policy, self.acting = policy, acting if acting is not None else make_acting(policy, backend)
        self.noise = None if deterministic else StreamNoise(seed)
        self.states: dict[ActorID, State] = {}

    def reset(self) -> None:
        """Forget every actor's state: the next observations start new episodes."""
        self.states.clear()

    def __call__(self, observation: Mapping[str, np.ndarray], actor_id: ActorID) -> dict[str, np.ndarray]:
        actor_id = ActorID(*actor_id)
        key = actor_id.step_key
        obs = {k: np.asarray(v)[None] for k, v in observation.items()}
        state = self.states.get(actor_id)
        if state is None:
            shapes = self.acting.state_shapes(key)
            state = {name: np.zeros((1, *shape), dtype=np.float32) for name, shape in shapes.items()}
        actions, _, self.states[actor_id] = self.acting.act(key, obs, state, np.array([actor_id.agent_id]), self.noise)
        space = self.policy.action_spaces[key]
        return {k: a[0].astype(storage_dtype(space[k])) for k, a in actions.items()}
