"""How actors turn observations into actions: batched, numpy in and numpy out.

:func:`make_acting` gives an actor a :class:`~maze_impala.nn.numpy_acting.NumpyActing`
(the policy's MLPs in numpy, see :mod:`maze_impala.nn.numpy_acting`) wherever the
policy is made only of what it covers: shared :class:`StepNet` networks and
categorical action heads (Discrete, MultiDiscrete, with or without masks).
:func:`numpy_spec` describes such a policy in plain data, so that an actor process can
act without importing torch. Any other policy (per-agent networks, Gaussian or
Bernoulli heads, a subclass with its own ``raw_logits``) acts through
:class:`TorchActing`. Both read the torch module's parameters, so loading new weights
into it is all an update takes.
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np
import torch

from maze_impala.actors.weights import flat_layout
from maze_impala.core import NestedArrays, StepKey
from maze_impala.nn.distributions import CategoricalHead
from maze_impala.nn.models import StepNet, StructuredPolicy
from maze_impala.nn.numpy_acting import ACTIVATIONS, Acting, Actions, NumpyActing, NumpyPolicySpec, NumpyStepSpec

__all__ = ["Acting", "NumpyActing", "TorchActing", "make_acting", "numpy_spec", "numpy_unsupported"]


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


def numpy_spec(policy: StructuredPolicy) -> NumpyPolicySpec:
    """``policy`` as plain data for :class:`NumpyActing`; a ValueError if numpy cannot run it."""
    reason = numpy_unsupported(policy)
    if reason:
        raise ValueError(f"NumpyActing cannot run this policy: {reason}; use TorchActing")
    names = {id(p): name for name, p in policy.named_parameters()}
    steps = {}
    for key in policy.step_keys:
        net = policy.networks[str(key)]
        encoder: list[tuple[str, int | None, int, int | None]] = []
        for obs_key, space in net.encoder.space.spaces.items():
            if isinstance(space, gym.spaces.Discrete):
                encoder.append((obs_key, None, int(space.start), int(space.n)))
            elif isinstance(space, gym.spaces.MultiDiscrete):
                encoder += [(obs_key, i, 0, int(n)) for i, n in enumerate(space.nvec.flat)]
            else:
                encoder.append((obs_key, None, 0, None))
        heads, offset = [], 0
        for action_key, head in policy.distribution(key).heads.items():
            heads.append((action_key, list(head.nvec), bool(head.squeeze), offset))
            offset += head.n_inputs
        layers = [(names[id(layer.weight)], names[id(layer.bias)]) for layer in net._linears]
        steps[key] = NumpyStepSpec(encoder, layers, net.activation_name, heads, dict(policy.masks[key]))
    return NumpyPolicySpec(steps, flat_layout(policy))


def make_acting(policy: StructuredPolicy, seed: int, backend: str = "auto") -> Acting:
    """``auto``: numpy where the policy allows it, else torch; ``numpy`` or ``torch`` to choose. A numpy acting
    reads the module's parameters in place, so loading weights into the module updates it."""
    if backend not in ("auto", "numpy", "torch"):
        raise ValueError(f"acting backend must be auto, numpy or torch, got {backend!r}")
    if backend == "torch" or (backend == "auto" and numpy_unsupported(policy)):
        return TorchActing(policy, seed)
    acting = NumpyActing(numpy_spec(policy), seed)
    acting.bind({name: p.detach().numpy() for name, p in policy.named_parameters()})
    return acting
