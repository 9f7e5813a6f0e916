"""Acting in numpy, without torch: :class:`NumpyActing` runs the numpy form a policy exports (:mod:`.numpy_forms`).

An actor runs its policy once per sub-step on a small batch (16 to 64 observations). At that size torch spends
most of its time dispatching ops, not computing: one sampled action for 16 CartPole observations costs about
100 us in torch and about 30 us as the same maths in numpy. A module that can act this way exports its numpy
form as plain data naming the entries of its state dict it reads (parameters and buffers alike, see
:meth:`~maze_impala.nn.models.StructuredPolicy.numpy_form`); :class:`NumpyActing` computes its actions from that
form and a flat weight vector (:mod:`maze_impala.nn.flat`), so an actor process acting this way never imports
torch (about 1.2 s of its start and 200 MB of its memory). Sampling draws from a
:class:`~maze_impala.nn.acting.Noise` exactly as the torch heads do, so both ways take the same actions.

Nothing in this module imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from maze_impala.core import NestedArrays, StepKey
from maze_impala.masking import MASKED_LOGIT, mask_error
from maze_impala.nn.acting import Acting, Actions, Noise, State
from maze_impala.nn.flat import unflatten
from maze_impala.nn.numpy_forms import HeadForm, NumpyPolicyForm, StepForm

ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": lambda h: np.tanh(h, out=h),
    "relu": lambda h: np.maximum(h, 0.0, out=h),
    "elu": lambda h: np.where(h > 0, h, np.expm1(np.minimum(h, 0.0))),
    "silu": lambda h: h / (1.0 + np.exp(-h)),
}
HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
SQUASH_EPS = 1e-6  # as maze_impala.nn.distributions.SQUASH_EPS (this module does not import torch)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


class _NumpyStep:
    """One step key at run time: its form, one-hot tables, and the weight arrays it is bound to."""

    def __init__(self, step_key: StepKey, form: StepForm):
        self.step_key, self.form = step_key, form
        self.one_hot = {n: np.eye(n, dtype=np.float32) for *_, n in form.network.encoder if n is not None}
        self.activation = ACTIVATIONS[form.network.activation]
        self.recurrent = form.network.core is not None
        self.arrays: Mapping[str, np.ndarray] = {}
        self.parts: list[tuple[str, int | None, int, int | None, tuple | None]] = []
        """The encoder's parts, each with its normalisation (mean, scale, clip) or None."""

    def bind(self, arrays: Mapping[str, np.ndarray]) -> None:
        net = self.form.network
        self.arrays = arrays
        self.hidden = [(arrays[w].T, arrays[b]) for w, b in net.hidden]
        self.output = (arrays[net.output[0]].T, arrays[net.output[1]])
        if net.core is not None:
            core = net.core
            self.core = (arrays[core.weight_ih].T, arrays[core.weight_hh].T, arrays[core.bias_ih], arrays[core.bias_hh])
        norm, scales = self.form.normalizer, {}
        if norm is not None:
            for key, mean, var in norm.keys:
                scale = 1.0 / np.sqrt(arrays[var] + np.float32(norm.eps))
                scales[key] = (arrays[mean].reshape(-1), scale.reshape(-1), norm.clip)
        self.parts = [(*part, scales.get(part[0])) for part in net.encoder]

    def features(self, obs: NestedArrays) -> np.ndarray:
        parts = []
        for key, column, start, size, scaling in self.parts:
            x = obs[key]
            if size is None:
                x = x.reshape(len(x), -1).astype(np.float32, copy=False)
                if key in self.form.network.scalings:
                    low, scale = self.form.network.scalings[key]
                    x = (x - low) * scale
                if scaling is not None:
                    mean, scale, clip = scaling
                    x = np.clip((x - mean) * scale, -clip, clip)
                parts.append(x)
            else:  # out-of-range codes (padding) are clamped, as the torch encoder does
                codes = (x if column is None else x[..., column]).astype(np.int64) - start
                parts.append(self.one_hot[size][np.clip(codes, 0, size - 1)])
        h = np.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]
        for w, b in self.hidden:
            h = h @ w
            h += b
            h = self.activation(h)
        return h

    def recur(self, x: np.ndarray, state: State) -> tuple[np.ndarray, State]:
        core = self.form.network.core
        assert core is not None
        w_ih, w_hh, b_ih, b_hh = self.core
        h = state["h"]
        if core.kind == "lstm":
            gates = x @ w_ih + b_ih + (h @ w_hh + b_hh)
            i, f, g, o = np.split(gates, 4, axis=-1)
            c = _sigmoid(f) * state["c"] + _sigmoid(i) * np.tanh(g)
            h = _sigmoid(o) * np.tanh(c)
            return h, {"h": h.astype(np.float32, copy=False), "c": c.astype(np.float32, copy=False)}
        units = core.units
        gx = x @ w_ih + b_ih
        gh = h @ w_hh + b_hh
        r = _sigmoid(gx[:, :units] + gh[:, :units])
        z = _sigmoid(gx[:, units : 2 * units] + gh[:, units : 2 * units])
        n = np.tanh(gx[:, 2 * units :] + r * gh[:, 2 * units :])
        h = (1.0 - z) * n + z * h
        return h, {"h": h.astype(np.float32, copy=False)}

    def logits(self, h: np.ndarray, obs: NestedArrays) -> np.ndarray:
        w_out, b_out = self.output
        out = h @ w_out
        out += b_out
        if not self.form.masks:
            return out
        for head in self.form.heads:
            if head.key in self.form.masks:
                mask_key = self.form.masks[head.key]
                allowed = obs[mask_key] > 0.5
                if not allowed.any(-1).all():
                    raise mask_error(self.step_key, mask_key, head.key)
                out[:, head.offset : head.offset + sum(head.nvec)][~allowed] = MASKED_LOGIT
        return out

    def sample(self, logits: np.ndarray, noise: Noise | None) -> tuple[dict[str, np.ndarray], np.ndarray]:
        rows = np.arange(len(logits))
        actions: dict[str, np.ndarray] = {}
        total = np.zeros(len(logits), dtype=np.float32)
        for head in self.form.heads:
            if head.kind == "gaussian":
                actions[head.key], log_prob = self._gaussian(head, logits, noise)
                total += log_prob
                continue
            chosen, offset = [], head.offset
            for n in head.nvec:
                z = logits[:, offset : offset + n]
                z = z - z.max(-1, keepdims=True)
                weights = np.exp(z)  # unnormalised probabilities; the largest is 1
                if noise is None:
                    action = z.argmax(-1)
                else:  # inverse CDF: the first action whose cumulative weight exceeds u * total weight
                    cdf = weights.cumsum(-1, dtype=np.float64)  # in float64, u rounds up to the total ~never
                    u = noise.uniform(len(cdf), 1)[:, 0] * cdf[:, -1]
                    action = np.minimum((cdf <= u[:, None]).sum(-1), n - 1)
                total += z[rows, action] - np.log(weights.sum(-1))
                chosen.append(action)
                offset += n
            actions[head.key] = chosen[0] if head.squeeze else np.stack(chosen, axis=-1)
        return actions, total

    def _gaussian(self, head: HeadForm, logits: np.ndarray, noise: Noise | None) -> tuple[np.ndarray, np.ndarray]:
        width = int(np.prod(head.shape))
        mean = logits[:, head.offset : head.offset + width]
        log_std = self.arrays[head.log_std]  # type: ignore[index]
        if noise is None:
            action, z = mean.astype(np.float32), np.zeros_like(mean)
        else:
            z = noise.normal(len(mean), width).astype(np.float32)
            action = mean + z * np.exp(log_std)
        slope = 0.0
        if head.squash is not None:  # as GaussianHead: the log-probability of the squashed action, as stored
            center, half = (np.asarray(part, np.float32) for part in head.squash)
            action = (center + half * np.tanh(action)).astype(np.float32)
            share = np.clip((action - center) / half, -1 + SQUASH_EPS, 1 - SQUASH_EPS)
            z = (np.arctanh(share) - mean) / np.exp(log_std)
            slope = (np.log(half) + np.log1p(-share * share)).sum(-1)
        log_prob = (-0.5 * z * z - log_std - np.float32(HALF_LOG_2PI)).sum(-1) - slope
        return action.reshape(len(mean), *head.shape), log_prob.astype(np.float32)


class NumpyActing(Acting):
    """Acting in numpy from a policy's :class:`NumpyPolicyForm`; :meth:`load` gives it weights."""

    def __init__(self, form: NumpyPolicyForm):
        unread = form.unread()
        if unread:
            raise ValueError(f"the numpy form does not read {sorted(unread)[:4]} of the policy's state: act in torch")
        self.form = form
        self.steps = {key: _NumpyStep(key, step) for key, step in form.steps.items()}

    def state_shapes(self, step_key: StepKey) -> dict[str, tuple[int, ...]]:
        core = self.form.steps[step_key].network.core
        return core.state_shapes() if core is not None else {}

    def load(self, flat: np.ndarray) -> None:
        arrays = unflatten(flat, self.form.layout)
        for step in self.steps.values():
            step.bind(arrays)

    def act(
        self, step_key: StepKey, obs: NestedArrays, state: State, agent_ids: np.ndarray, noise: Noise | None
    ) -> Actions:
        logits, state = self.logits(step_key, obs, state)
        actions, log_probs = self.steps[step_key].sample(logits, noise)
        return actions, log_probs, state

    def logits(self, step_key: StepKey, obs: NestedArrays, state: State) -> tuple[np.ndarray, State]:
        """``step_key``'s masked logits ``[B, L]`` for ``[B, ...]`` observations from ``state``, and the next state."""
        step = self.steps[step_key]
        h = step.features(obs)
        if step.recurrent:
            h, state = step.recur(h, state)
        return step.logits(h, obs), state

    def array(self, name: str) -> np.ndarray:
        """An entry of the loaded weights (a Gaussian head's log standard deviations)."""
        return next(iter(self.steps.values())).arrays[name]
