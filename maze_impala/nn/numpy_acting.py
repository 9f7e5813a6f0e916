"""Acting in numpy, without torch: what an actor process needs to turn observations into actions.

An actor runs its policy once per sub-step on a small batch (16 to 64
observations). At that size torch spends most of its time dispatching ops, not
computing: one sampled action for 16 CartPole observations costs about 100 us in
torch and about 30 us as the same maths in numpy. A :class:`NumpyPolicySpec`
describes a policy of shared MLPs with categorical heads in plain data (made from
the torch policy by :func:`maze_impala.nn.acting.numpy_spec`), and a
:class:`NumpyActing` computes its actions from that description and a set of weight
arrays: views of the torch module's parameters in the learner's process, or of one
flat weight vector in an actor process, which then never imports torch (about 1.2 s
of an actor process' start and 200 MB of its memory).

Nothing in this module imports torch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from maze_impala.core import NestedArrays, StepKey

MASKED_LOGIT = -1e9
"""The logit of a masked action (its probability underflows to 0)."""
Actions = tuple[dict[str, np.ndarray], np.ndarray]
"""Actions per action key, ``[B, ...]``, and their joint log-probabilities, ``[B]`` float32."""
Layout = list[tuple[str, tuple[int, ...], int]]
"""(name, shape, number of elements) of each tensor of a state dict, in order: how a flat weight vector splits."""


def mask_error(step_key: StepKey, mask_key: str, action_key: str) -> ValueError:
    """The error for an observation that allows no action of a head."""
    return ValueError(
        f"step key {step_key!r}: observation {mask_key!r} masks every action of {action_key!r}; "
        "an env must leave at least one action allowed"
    )


def unflatten(flat: np.ndarray, layout: Layout) -> dict[str, np.ndarray]:
    """Views of ``flat`` shaped as ``layout`` says, by name."""
    arrays, offset = {}, 0
    for name, shape, numel in layout:
        arrays[name] = flat[offset : offset + numel].reshape(shape)
        offset += numel
    return arrays


class Acting(ABC):
    """Batched acting for one actor, drawing from the actor's own random stream."""

    @abstractmethod
    def act(self, step_key: StepKey, obs: NestedArrays, deterministic: bool, agent_ids: np.ndarray) -> Actions:
        """Actions for a ``[B, ...]`` batch of ``step_key`` observations taken by agents ``agent_ids``."""


ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": lambda h: np.tanh(h, out=h),
    "relu": lambda h: np.maximum(h, 0.0, out=h),
    "elu": lambda h: np.where(h > 0, h, np.expm1(np.minimum(h, 0.0))),
    "silu": lambda h: h / (1.0 + np.exp(-h)),
}


@dataclass(frozen=True)
class NumpyStepSpec:
    """One step key's network and action heads, as plain data."""

    encoder: list[tuple[str, int | None, int, int | None]]
    """Per encoded part: (observation key, column of a MultiDiscrete or None, first code, one-hot size or None
    for a Box)."""
    layers: list[tuple[str, str]]
    """The (weight, bias) names of the MLP's linear layers in the policy's state dict, the output layer last."""
    activation: str
    heads: list[tuple[str, list[int], bool, int]]
    """Per action key: (action key, sizes of its categoricals, Discrete (no trailing axis), offset in the logits)."""
    masks: dict[str, str]
    """Action key -> the observation key of its mask."""


@dataclass(frozen=True)
class NumpyPolicySpec:
    """A policy :class:`NumpyActing` can run: its step keys' specs and the layout of its flat weights."""

    steps: dict[StepKey, NumpyStepSpec]
    layout: Layout


class _NumpyStep:
    """One step key at run time: the spec, one-hot tables, and the weights it is bound to."""

    def __init__(self, step_key: StepKey, spec: NumpyStepSpec):
        self.step_key, self.spec = step_key, spec
        self.one_hot = {n: np.eye(n, dtype=np.float32) for *_, n in spec.encoder if n is not None}
        self.activation = ACTIVATIONS[spec.activation]
        self.layers: list[tuple[np.ndarray, np.ndarray]] = []

    def bind(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.layers = [(arrays[weight].T, arrays[bias]) for weight, bias in self.spec.layers]

    def logits(self, obs: NestedArrays) -> np.ndarray:
        parts = []
        for key, column, start, size in self.spec.encoder:
            x = obs[key]
            if size is None:
                parts.append(x.reshape(len(x), -1).astype(np.float32, copy=False))
            else:  # out-of-range codes (padding) are clamped, as the torch encoder does
                codes = (x if column is None else x[..., column]).astype(np.int64) - start
                parts.append(self.one_hot[size][np.clip(codes, 0, size - 1)])
        h = np.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]
        *hidden, (w_out, b_out) = self.layers
        for w, b in hidden:
            h = h @ w
            h += b
            h = self.activation(h)
        out = h @ w_out
        out += b_out
        for key, nvec, _, offset in self.spec.heads:
            if key in self.spec.masks:
                allowed = obs[self.spec.masks[key]] > 0.5
                if not allowed.any(-1).all():
                    raise mask_error(self.step_key, self.spec.masks[key], key)
                out[:, offset : offset + sum(nvec)][~allowed] = MASKED_LOGIT
        return out


class NumpyActing(Acting):
    """Acting in numpy for policies of shared MLPs with categorical heads (see :class:`NumpyPolicySpec`).

    :meth:`bind` (views of weight arrays by name) or :meth:`load` (a flat weight vector) gives it weights.
    Sampling is by inverse CDF on the actor's own ``numpy`` generator; masked actions have probability 0 and
    are never drawn.
    """

    def __init__(self, spec: NumpyPolicySpec, seed: int):
        self.spec = spec
        self.steps = {key: _NumpyStep(key, step) for key, step in spec.steps.items()}
        self.rng = np.random.default_rng(seed)

    def bind(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Act with these weight arrays (by state-dict name), read where they are, as they change."""
        for step in self.steps.values():
            step.bind(arrays)

    def load(self, flat: np.ndarray) -> None:
        """Act with a flat weight vector laid out as the spec says (kept, not copied)."""
        self.bind(unflatten(flat, self.spec.layout))

    def act(self, step_key: StepKey, obs: NestedArrays, deterministic: bool, agent_ids: np.ndarray) -> Actions:
        step = self.steps[step_key]
        logits = step.logits(obs)
        rows = np.arange(len(logits))
        actions: dict[str, np.ndarray] = {}
        total = np.zeros(len(logits), dtype=np.float32)
        for key, nvec, squeeze, offset in step.spec.heads:
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
