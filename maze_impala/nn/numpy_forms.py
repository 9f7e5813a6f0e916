"""The numpy form of a policy: plain data naming the state-dict entries each part reads, which a torch module
exports (``numpy_form()``) and :class:`~maze_impala.nn.numpy_acting.NumpyActing` runs.

The types live apart from the interpreter, so that the torch modules that export them import neither numpy
acting nor each other through it. Nothing in this module imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from maze_impala.core import StepKey
from maze_impala.nn.flat import Layout


@dataclass(frozen=True)
class NormalizerForm:
    """Observation keys scaled by running statistics: (key, mean entry, variance entry), clipped to +-clip."""

    keys: list[tuple[str, str, str]]
    clip: float
    eps: float
    counts: list[str]
    """The entries of the sample counts: state the learner updates with, that acting does not need."""

    def names(self) -> set[str]:
        return {name for _, mean, var in self.keys for name in (mean, var)} | set(self.counts)


@dataclass(frozen=True)
class CoreForm:
    """A one-layer LSTM or GRU (torch's gate order), by the names of its weights."""

    kind: str
    units: int
    weight_ih: str
    weight_hh: str
    bias_ih: str
    bias_hh: str

    def names(self) -> set[str]:
        return {self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh}

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"h": (self.units,), "c": (self.units,)} if self.kind == "lstm" else {"h": (self.units,)}


@dataclass(frozen=True)
class NetworkForm:
    """Encoder (one-hot or flattened parts), MLP layers, an optional recurrent core, and the output layer."""

    encoder: list[tuple[str, int | None, int, int | None]]
    """Per encoded part: (observation key, column of a MultiDiscrete or None, first code, one-hot size or None
    for a Box)."""
    hidden: list[tuple[str, str]]
    """The (weight, bias) entries of the hidden layers."""
    activation: str
    core: CoreForm | None
    output: tuple[str, str]
    scalings: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    """Box keys entering as ``(x - low) * scale`` (flattened uint8 images, scaled to [0, 1] by their bounds)."""

    def names(self) -> set[str]:
        names = {name for layer in (*self.hidden, self.output) for name in layer}
        return names | (self.core.names() if self.core else set())


@dataclass(frozen=True)
class HeadForm:
    """One action head: categoricals (Discrete, MultiDiscrete) or a diagonal Gaussian (Box)."""

    key: str
    kind: str
    """categorical or gaussian"""
    offset: int
    """Where its logits start in the network's output."""
    nvec: list[int]
    """categorical: the sizes of its categoricals"""
    squeeze: bool = False
    """categorical: a Discrete action (no trailing axis)"""
    log_std: str | None = None
    """gaussian: the entry of its log standard deviations"""
    shape: tuple[int, ...] = ()
    """gaussian: the action's shape"""
    squash: tuple[list[float], list[float]] | None = None
    """gaussian: the (center, half-width) per dimension that a squashed sample's tanh is mapped into; None: clip"""

    def names(self) -> set[str]:
        return {self.log_std} if self.log_std else set()


@dataclass(frozen=True)
class StepForm:
    normalizer: NormalizerForm | None
    network: NetworkForm
    heads: list[HeadForm]
    masks: dict[str, str]
    """Action key -> the observation key of its mask."""

    def names(self) -> set[str]:
        names = self.network.names() | {n for head in self.heads for n in head.names()}
        return names | (self.normalizer.names() if self.normalizer else set())


@dataclass(frozen=True)
class NumpyPolicyForm:
    """A policy as plain data: its step keys' forms and the layout of its flat weights (state dict order)."""

    steps: dict[StepKey, StepForm]
    layout: Layout

    def unread(self) -> set[str]:
        """Entries of the state dict that no form reads: a policy with any cannot act in numpy."""
        read = set().union(*(step.names() for step in self.steps.values())) if self.steps else set()
        return {name for name, _, _ in self.layout} - read
