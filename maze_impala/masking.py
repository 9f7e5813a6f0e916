"""How an action mask enters the logits: the ground floor that the torch policy, numpy acting and a deployed policy
share (no Gymnasium, no torch)."""

from __future__ import annotations

MASK_SUFFIX = "_mask"
"""An observation key ``<action key>_mask`` masks the discrete action head ``<action key>`` (1: allowed)."""
MASKED_LOGIT = -1e9
"""The logit of a masked action (its probability underflows to 0)."""


def mask_error(step_key: object, mask_key: str, action_key: str) -> ValueError:
    """The error for an observation that allows no action of a head."""
    return ValueError(
        f"step key {step_key!r}: observation {mask_key!r} masks every action of {action_key!r}; "
        "an env must leave at least one action allowed"
    )
