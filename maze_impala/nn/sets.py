"""A policy network that scores the rows of an observation with shared weights: one trained network for any number
of rows (jobs, items, candidates), through ``model.networks``.

    maze-run -cn conf_train env=jobshop   # its config sets model.networks._target_=maze_impala.nn.sets.RowScoringNet

Each row is embedded by the same MLP; ``attention_layers`` blocks of masked self-attention let every row see the
others; each row's score then reads its embedding beside the mean and the maximum over the valid rows. Its output is
one logit per row, so the step key's action is a row index (``Discrete(rows)``). Nothing in its weights depends on
the number of rows: a policy trained on instances of 15 jobs runs on 30 or 50 where the env pads its observation
to that many rows.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from torch import nn


class RowScoringNet(nn.Module):
    """One logit per row of observation ``rows`` (``[B, R, F]``), from weights shared by every row.

    Args:
        observation_space: the step key's observation space (a Dict holding ``rows``).
        n_outputs: the action head's inputs; must be R, one logit per row.
        rows: the observation key of the ``[R, F]`` rows.
        valid_feature: the column whose value is > 0 in a row that counts (padding and finished rows: 0); None: all
            rows count.
        hidden: the width of each row's embedding.
        attention_layers: blocks of masked multi-head self-attention over the rows (0: a Deep Sets network).
        heads: attention heads per block.
    """

    def __init__(
        self,
        observation_space: gym.spaces.Dict,
        n_outputs: int,
        rows: str = "jobs",
        valid_feature: int | None = 0,
        hidden: int = 64,
        attention_layers: int = 1,
        heads: int = 4,
    ):
        super().__init__()
        if rows not in observation_space.spaces or len(observation_space[rows].shape) != 2:
            raise ValueError(
                f"RowScoringNet needs an observation {rows!r} of shape [rows, features]; the step key has "
                f"{ {k: getattr(v, 'shape', None) for k, v in observation_space.spaces.items()} }"
            )
        n_rows, n_features = observation_space[rows].shape
        if n_outputs != n_rows:
            raise ValueError(
                f"RowScoringNet gives one logit per row of {rows!r} ({n_rows}), but the action head takes {n_outputs}: "
                "the step key's action must be one Discrete(rows)"
            )
        self.rows, self.valid_feature = rows, valid_feature
        self.embed = nn.Sequential(nn.Linear(n_features, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(hidden, heads, 2 * hidden, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(attention_layers)
        )
        self.score = nn.Sequential(nn.Linear(3 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        nn.init.orthogonal_(self.score[-1].weight, gain=0.01)  # near-uniform first choices, as the built-in head
        nn.init.zeros_(self.score[-1].bias)

    def forward(self, observations: dict[str, torch.Tensor]) -> torch.Tensor:
        x = observations[self.rows].float()
        if self.valid_feature is None:
            valid = torch.ones(x.shape[:-1], dtype=torch.bool, device=x.device)
        else:
            valid = x[..., self.valid_feature] > 0
        # a batch entry without a valid row (a final observation) attends to all, so that no softmax is empty
        valid = valid | ~valid.any(-1, keepdim=True)
        h = self.embed(x)
        for block in self.blocks:
            h = block(h, src_key_padding_mask=~valid)
        weights = valid.unsqueeze(-1).to(h.dtype)
        mean = (h * weights).sum(-2) / weights.sum(-2)
        largest = h.masked_fill(~valid.unsqueeze(-1), float("-inf")).amax(-2)
        context = torch.cat([mean, largest], -1).unsqueeze(-2).expand(*h.shape[:-1], -1)
        return self.score(torch.cat([h, context], -1)).squeeze(-1)
