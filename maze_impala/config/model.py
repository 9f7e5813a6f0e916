"""The networks: one per policy and per critic (per step key), and what they are made of."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from maze_impala.config.base import ConfigError, check, check_choice

CRITIC_TYPES = ("step", "shared", "delta")
ACTIVATIONS = ("tanh", "relu", "elu", "silu")
RECURRENT = ("none", "lstm", "gru")
IMAGE_ENCODERS = ("auto", "impala", "nature", "small", "flatten")
INITS = ("orthogonal", "default")
ACTION_BOUNDS = ("clip", "squash")
FLATTEN_BELOW_PIXELS = 36 * 36
"""``image_encoder=auto`` flattens images of fewer pixels (height x width) than this into the MLP: boards, MinAtar's
10x10 and MiniGrid's 7x7 views, small renderings. At these sizes the MLP learnt as fast or faster per env step and
trained several times faster per second than either CNN (docs/benchmarks.md, "Which image encoder"); 36x36 is
also the smallest image the Nature CNN takes."""


def image_pixels(shape: tuple[int, ...]) -> int:
    """Height x width of a rank-3 image, channels first or last (the channel axis is the smaller end)."""
    channels = min(int(shape[0]), int(shape[-1]))
    return math.prod(int(n) for n in shape) // max(channels, 1)


def auto_image_encoder(image_shapes: list[tuple[int, ...]], device: str) -> str:
    """What ``image_encoder=auto`` becomes for a run whose image observations have ``image_shapes`` and whose learner
    runs on ``device``: ``flatten`` where every image has fewer than :data:`FLATTEN_BELOW_PIXELS` pixels; else the
    Nature CNN for a CPU learner (about 10 times the IMPALA CNN's learner samples per second on 84x84x4 frames
    there) and the IMPALA CNN for a GPU learner (the paper's network, where its compute is cheap). Without images:
    ``flatten`` (nothing to encode)."""
    if not image_shapes or max(image_pixels(s) for s in image_shapes) < FLATTEN_BELOW_PIXELS:
        return "flatten"
    return "nature" if device == "cpu" else "impala"


@dataclass
class ModelConfig:
    """The networks of every policy and critic (see docs/models.md)."""

    hidden_units: list[int] = field(default_factory=lambda: [128, 128])
    """Widths of the MLP layers after each step key's observation encoder."""
    activation: str = "tanh"
    """One of tanh, relu, elu, silu."""
    per_agent_networks: bool = False
    """One policy network per agent of a step key (its agent count must be fixed), instead of one shared."""
    agent_groups: dict[str, list[str]] = field(default_factory=dict)
    """Policies mapped to groups of agents: ``{group: [agent names]}`` (PettingZoo's names, or ``<step key>_<i>``).
    The agents of a group share a policy network, the other agents of their step key share one more (see
    :mod:`maze_impala.nn.groups`). Empty: per_agent_networks decides."""
    critic: str = "step"
    """step: one critic per step key; shared: one network for every sub-step; delta: later sub-steps
    predict the change to the previous sub-step's value (see :mod:`maze_impala.nn.critics`)."""
    recurrent: str = "none"
    """none, lstm or gru: a recurrent core after each policy network's MLP layers (per step key, or per agent with
    per_agent_networks). Its state is kept per env and agent by the actors and re-unrolled by the learner from
    each rollout's first state; the critics read the core's output (detached) beside their own encoding."""
    recurrent_units: int = 128
    """Units of the recurrent core."""
    normalize_observations: bool = True
    """Normalise Box observations (not action masks or images) by running mean and variance per step key and key,
    clipped to +-5 standard deviations. The statistics are model buffers: the learner updates them once per batch,
    and they travel with the weights to the actors and into every checkpoint."""

    image_encoder: str = "auto"
    """How image observations (rank-3 Box keys, HWC or CHW, uint8 or float) are encoded: impala (IMPALA's residual
    CNN), nature (the DQN Nature CNN, images of at least 36x36), small (MinAtar's one 3x3 convolution), flatten
    (into the MLP), or auto: flatten below 36x36 pixels, else nature for a CPU learner and impala for a GPU learner
    (:func:`auto_image_encoder`; a run records what auto became). uint8 frames are scaled to [0, 1] on the model's
    device by each of them; other keys of a Dict observation go through the MLP encoder."""
    image_features: int = 256
    """Width of a CNN's output (its final linear layer), per image key."""
    critic_hidden_units: list[int] | None = None
    """Widths of the critics' MLP layers; None: hidden_units (EvoRL's separate actor and critic widths)."""
    init: str = "orthogonal"
    """How linear layers start: orthogonal (gain sqrt(2) for hidden layers, 0.01 for the policy's output, 1 for
    the value's; zero biases), or default (torch's own). CNN layers always start as torch's."""
    init_log_std: float = -0.5
    """The initial log standard deviation of every Box (Gaussian) action, in units of each dimension's half-width
    ``(high - low) / 2`` (a dimension without finite bounds counts 1): -0.5 starts at 0.61 half-widths (Walker2d
    judged 3,824 against 3,572 at 0, the medians of 3 seeds, the lowest 2,546 against 964; docs/benchmarks.md).
    The log standard deviation is a learnt parameter per dimension, independent of the observation."""
    action_bounds: str = "clip"
    """How Box actions meet their bounds: clip (the Gaussian's samples are clipped on the way to the env; the
    rollout keeps the sample) or squash (``tanh`` into the bounds, with the log-probability's change of variables;
    a Box with an infinite bound has nothing to be squashed into, and is drawn unbounded under either). Squash won
    Walker2d and Pendulum by less than their seeds' spread, and lost the parametrized example, whose parameter
    copies its target (docs/benchmarks.md)."""
    critic_only_keys: list[str] = field(default_factory=list)
    """Observation keys that only the critics see (EvoRL's ``value_obs_key``): privileged information such as the
    env's global state for a centralised critic (PettingZoo: ``env.global_state``; ``env=pettingzoo`` sets
    ``[global_state]`` with every agent's observation in it). The policies never read them, so a trained policy acts
    without them. They are not normalised."""
    networks: dict[str, Any] = field(default_factory=dict)
    """Your own policy network: ``{_target_: my_module.MyNet, ...}`` for every step key, or one such config per step
    key name (``networks.<step_key>._target_``); the rest keep the built-in network. Built as
    ``MyNet(observation_space=..., n_outputs=..., **the other keys)`` (see :mod:`maze_impala.nn.custom`)."""

    def resolved(self, image_shapes: list[tuple[int, ...]], device: str) -> ModelConfig:
        """This config with ``image_encoder=auto`` replaced by what it becomes (see :func:`auto_image_encoder`)."""
        if self.image_encoder != "auto":
            return self
        return replace(self, image_encoder=auto_image_encoder(image_shapes, device))

    @property
    def critic_widths(self) -> list[int]:
        """The critics' MLP widths."""
        return list(self.critic_hidden_units if self.critic_hidden_units is not None else self.hidden_units)

    def __post_init__(self) -> None:
        check_choice("model.critic", self.critic, CRITIC_TYPES)
        check_choice("model.activation", self.activation, ACTIVATIONS)
        check_choice("model.recurrent", self.recurrent, RECURRENT)
        check_choice("model.image_encoder", self.image_encoder, IMAGE_ENCODERS)
        check(
            isinstance(self.image_features, int) and self.image_features >= 1,
            "model.image_features",
            self.image_features,
            "an int >= 1",
        )
        for name in ("hidden_units", "critic_hidden_units"):
            widths = getattr(self, name)
            if (widths is not None or name == "hidden_units") and (not widths or any(int(h) <= 0 for h in widths)):
                raise ConfigError(f"model.{name} must be a non-empty list of positive ints, got {widths}")
        check_choice("model.init", self.init, INITS)
        check_choice("model.action_bounds", self.action_bounds, ACTION_BOUNDS)
        check(
            isinstance(self.init_log_std, int | float) and math.isfinite(self.init_log_std),
            "model.init_log_std",
            self.init_log_std,
            "a finite number (the initial log standard deviation of Box actions, in half-widths)",
        )
        check(
            isinstance(self.critic_only_keys, list | tuple) and all(isinstance(k, str) for k in self.critic_only_keys),
            "model.critic_only_keys",
            self.critic_only_keys,
            "a list of observation key names",
        )
        groups = self.agent_groups
        check(
            isinstance(groups, dict)
            and all(isinstance(g, str) and isinstance(m, list | tuple) and m for g, m in groups.items())
            and all(isinstance(name, str) for members in groups.values() for name in members),
            "model.agent_groups",
            groups,
            "a mapping of group names to non-empty lists of agent names",
        )
        named = [name for members in groups.values() for name in members]
        twice = sorted({name for name in named if named.count(name) > 1})
        if twice:
            raise ConfigError(
                f"model.agent_groups puts {twice} in more than one group: each agent acts with one policy"
            )
        if groups and self.per_agent_networks:
            raise ConfigError(
                "model.agent_groups and model.per_agent_networks=true both say which agents share a "
                "policy: use one of them (per-agent networks are groups of one)"
            )
        if self.networks and (self.recurrent != "none" or self.per_agent_networks or groups):
            raise ConfigError(
                "model.networks (your own network) cannot be combined with model.recurrent, "
                "model.per_agent_networks or model.agent_groups: give your network its own structure, or use the "
                "built-in one"
            )
        check(
            isinstance(self.recurrent_units, int) and self.recurrent_units >= 1,
            "model.recurrent_units",
            self.recurrent_units,
            "an int >= 1",
        )
        if self.recurrent != "none" and self.critic == "delta":
            raise ConfigError(
                "model.critic=delta cannot read a recurrent policy's memory (it values earlier sub-steps' observations "
                "without their states); use model.critic=step or shared with model.recurrent"
            )
