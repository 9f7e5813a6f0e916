"""How actors turn observations into actions: batched, numpy in and numpy out.

An actor runs its policy once per sub-step on a small batch (16 to 64
observations). At that size torch spends most of its time dispatching ops, not
computing: one sampled action for 16 CartPole observations costs about 100 us in
torch and about 30 us as the same maths in numpy. :func:`make_acting` therefore
gives actors a :class:`NumpyActing`, a numpy view of the policy's MLPs, wherever
the policy is made only of what it covers: shared :class:`StepNet` networks and
categorical action heads (Discrete, MultiDiscrete, with or without masks). Any
other policy (per-agent networks, Gaussian or Bernoulli heads, a subclass with its
own ``raw_logits``) acts through :class:`TorchActing`. Both read the torch
module's parameters, so loading new weights into it is all an update takes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping

import gymnasium as gym
import numpy as np
import torch

from maze_impala.core import NestedArrays, StepKey
from maze_impala.nn.distributions import CategoricalHead
from maze_impala.nn.models import MASKED_LOGIT, StepNet, StructuredPolicy, mask_error

Actions = tuple[dict[str, np.ndarray], np.ndarray]
"""Actions per action key, ``[B, ...]``, and their joint log-probabilities, ``[B]`` float32."""


class Acting(ABC):
    """Batched acting for one actor, drawing from the actor's own random stream."""

    @abstractmethod
    def act(self, step_key: StepKey, obs: NestedArrays, deterministic: bool, agent_ids: np.ndarray) -> Actions:
        """Actions for a ``[B, ...]`` batch of ``step_key`` observations taken by agents ``agent_ids``."""


class TorchActing(Acting):
    """The policy's own :meth:`StructuredPolicy.act`; works for every policy."""

    def __init__(self, policy: StructuredPolicy, seed: int):
        self.policy = policy
        self.generator = torch.Generator().manual_seed(seed)

    def act(self, step_key: StepKey, obs: NestedArrays, deterministic: bool, agent_ids: np.ndarray) -> Actions:
        tensors = {k: torch.from_numpy(v) for k, v in obs.items()}
        agents = torch.from_numpy(agent_ids)
        actions, log_probs = self.policy.act(step_key, tensors, deterministic, self.generator, agents)
        return {k: a.numpy() for k, a in actions.items()}, log_probs.numpy()


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": lambda h: np.tanh(h, out=h),
    "relu": lambda h: np.maximum(h, 0.0, out=h),
    "elu": lambda h: np.where(h > 0, h, np.expm1(np.minimum(h, 0.0))),
    "silu": lambda h: h / (1.0 + np.exp(-h)),
}


class _NumpyStep:
    """One step key: its encoder, MLP layers (live views of the torch parameters) and categorical heads."""

    def __init__(self, policy: StructuredPolicy, step_key: StepKey):
        net = policy.networks[str(step_key)]
        self.step_key = step_key
        # Per encoded part: (observation key, column of a MultiDiscrete, offset, one-hot table or None for Box)
        self.encoder: list[tuple[str, int | None, int, np.ndarray | None]] = []
        for key, space in net.encoder.space.spaces.items():
            if isinstance(space, gym.spaces.Discrete):
                self.encoder.append((key, None, int(space.start), np.eye(int(space.n), dtype=np.float32)))
            elif isinstance(space, gym.spaces.MultiDiscrete):
                self.encoder += [(key, i, 0, np.eye(int(n), dtype=np.float32)) for i, n in enumerate(space.nvec.flat)]
            else:
                self.encoder.append((key, None, 0, None))
        self.layers = [(layer.weight.detach().numpy().T, layer.bias.detach().numpy()) for layer in net._linears]
        self.activation = ACTIVATIONS[net.activation_name]
        dist = policy.distribution(step_key)
        self.heads: list[tuple[str, list[int], bool, int]] = []  # (action key, nvec, squeeze, logit offset)
        offset = 0
        for key, head in dist.heads.items():
            self.heads.append((key, head.nvec, head.squeeze, offset))
            offset += head.n_inputs
        self.masks = policy.masks[step_key]

    def logits(self, obs: NestedArrays) -> np.ndarray:
        parts = []
        for key, column, start, one_hot in self.encoder:
            x = obs[key]
            if one_hot is None:
                parts.append(x.reshape(len(x), -1).astype(np.float32, copy=False))
            else:  # out-of-range codes (padding) are clamped, as the torch encoder does
                codes = (x if column is None else x[..., column]).astype(np.int64) - start
                parts.append(one_hot[np.clip(codes, 0, len(one_hot) - 1)])
        h = np.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]
        *hidden, (w_out, b_out) = self.layers
        for w, b in hidden:
            h = h @ w
            h += b
            h = self.activation(h)
        out = h @ w_out
        out += b_out
        for key, nvec, _, offset in self.heads:
            if key in self.masks:
                allowed = obs[self.masks[key]] > 0.5
                if not allowed.any(-1).all():
                    raise mask_error(self.step_key, self.masks[key], key)
                out[:, offset : offset + sum(nvec)][~allowed] = MASKED_LOGIT
        return out


class NumpyActing(Acting):
    """Acting in numpy for policies of shared MLPs with categorical heads (see :func:`numpy_supported`).

    Sampling is by inverse CDF on the actor's own ``numpy`` generator; masked actions
    have probability 0 and are never drawn.
    """

    def __init__(self, policy: StructuredPolicy, seed: int):
        reason = numpy_unsupported(policy)
        if reason:
            raise ValueError(f"NumpyActing cannot run this policy: {reason}; use TorchActing")
        self.steps = {key: _NumpyStep(policy, key) for key in policy.step_keys}
        self.rng = np.random.default_rng(seed)

    def act(self, step_key: StepKey, obs: NestedArrays, deterministic: bool, agent_ids: np.ndarray) -> Actions:
        step = self.steps[step_key]
        logits = step.logits(obs)
        rows = np.arange(len(logits))
        actions: dict[str, np.ndarray] = {}
        total = np.zeros(len(logits), dtype=np.float32)
        for key, nvec, squeeze, offset in step.heads:
            chosen = []
            for n in nvec:
                z = logits[:, offset : offset + n]
                z = z - z.max(-1, keepdims=True)
                weights = np.exp(z)  # unnormalised probabilities; the largest is 1
                if deterministic:
                    action = z.argmax(-1)
                else:  # inverse CDF: the first action whose cumulative weight exceeds u * total weight
                    cdf = weights.cumsum(-1, dtype=np.float64)  # in float64, u rounds up to the total ~never
                    u = self.rng.random(len(cdf)) * cdf[:, -1]
                    action = np.minimum((cdf <= u[:, None]).sum(-1), n - 1)
                total += z[rows, action] - np.log(weights.sum(-1))
                chosen.append(action)
                offset += n
            actions[key] = chosen[0] if squeeze else np.stack(chosen, axis=-1)
        return actions, total


def numpy_unsupported(policy: StructuredPolicy) -> str | None:
    """Why :class:`NumpyActing` cannot run ``policy``, or None if it can."""
    if type(policy).raw_logits is not StructuredPolicy.raw_logits:
        return f"{type(policy).__name__} computes its own logits"
    for key in policy.step_keys:
        net = policy.networks[str(key)]
        if type(net) is not StepNet:
            return f"step key {key!r} has a {type(net).__name__}"
        if net.activation_name not in ACTIVATIONS:
            return f"activation {net.activation_name!r}"
        heads: Mapping[str, torch.nn.Module] = policy.distribution(key).heads
        for name, head in heads.items():
            if type(head) is not CategoricalHead:
                return f"action {name!r} of step key {key!r} has a {type(head).__name__}"
    return None


def make_acting(policy: StructuredPolicy, seed: int, backend: str = "auto") -> Acting:
    """``auto``: numpy where the policy allows it, else torch; ``numpy`` or ``torch`` to choose."""
    if backend not in ("auto", "numpy", "torch"):
        raise ValueError(f"acting backend must be auto, numpy or torch, got {backend!r}")
    if backend == "torch" or (backend == "auto" and numpy_unsupported(policy)):
        return TorchActing(policy, seed)
    return NumpyActing(policy, seed)
