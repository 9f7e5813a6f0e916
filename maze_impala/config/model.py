"""The networks: one MLP per policy and per critic (per step key)."""

from __future__ import annotations

from dataclasses import dataclass, field

from maze_impala.config.base import ConfigError, check_choice

CRITIC_TYPES = ("step", "shared", "delta")
ACTIVATIONS = ("tanh", "relu", "elu", "silu")


@dataclass
class ModelConfig:
    """The MLP used for every policy and critic network."""

    hidden_units: list[int] = field(default_factory=lambda: [128, 128])
    """Widths of the hidden layers."""
    activation: str = "tanh"
    """One of tanh, relu, elu, silu."""
    per_agent_networks: bool = False
    """One policy network per agent of a step key (its agent count must be fixed), instead of one shared."""
    critic: str = "step"
    """step: one critic per step key; shared: one network for every sub-step; delta: later sub-steps
    predict the change to the previous sub-step's value (see :mod:`maze_impala.nn.critics`)."""

    def __post_init__(self) -> None:
        check_choice("model.critic", self.critic, CRITIC_TYPES)
        check_choice("model.activation", self.activation, ACTIVATIONS)
        if not self.hidden_units or any(int(h) <= 0 for h in self.hidden_units):
            raise ConfigError(f"model.hidden_units must be a non-empty list of positive ints, got {self.hidden_units}")
