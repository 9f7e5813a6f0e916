"""Whole episodes with a fixed policy: the work of evaluators and of the rollout CLI.

:func:`run_episodes` plays a list of ``(episode id, seed)`` pairs on a few env slots
and returns one :class:`EpisodeResult` per episode: return, length, KPIs, the
episode's reduced events and optionally its raw events. With sampled actions each
episode draws from its own generator, seeded from its seed, so an episode's
actions depend only on its seed and the policy; with ``batched=False`` every
forward pass sees one observation, so results do not depend on how episodes are
spread over slots or processes either. Greedy actions of a policy on the CPU are computed
as the actors compute them, through :func:`~maze_impala.nn.acting.make_acting` (numpy
where the policy allows it: 64 against 147 us per CartPole env step of an evaluation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from maze_impala.actors.actor import seed_for
from maze_impala.envs.batch import EnvBatch
from maze_impala.envs.structured import StructuredEnv
from maze_impala.events.api import EventRecord
from maze_impala.nn.acting import make_acting
from maze_impala.nn.models import StructuredPolicy


@dataclass
class EpisodeResult:
    episode_id: int
    seed: int
    steps: int
    """Structured steps."""
    episode_return: float
    kpis: dict[str, float] = field(default_factory=dict)
    records: list[EventRecord] = field(default_factory=list)
    """The env's events of the episode, reduced as their interfaces declare."""
    raw: list[tuple[int, EventRecord]] = field(default_factory=list)
    """Every event of the episode with its structured step (when raw events were asked for)."""


def episode_slots(envs: list[StructuredEnv], keep_raw_events: bool = False) -> EnvBatch:
    """Env slots for :func:`run_episodes`; build them once and reuse them (they listen to the envs' events)."""
    return EnvBatch(envs, auto_reset=False, keep_raw_events=keep_raw_events)


@torch.no_grad()
def run_episodes(
    batch: EnvBatch,
    policy: StructuredPolicy,
    episodes: Sequence[tuple[int, int]],
    deterministic: bool,
    batched: bool = True,
    on_episode: Callable[[EpisodeResult], None] | None = None,
) -> list[EpisodeResult]:
    """Play ``episodes`` (``(episode id, seed)`` pairs) on the slots of ``batch``; results in episode order."""
    device = next(policy.parameters()).device
    greedy = make_acting(policy, seed=0) if deterministic and device.type == "cpu" else None  # draws nothing
    todo = list(episodes)[::-1]
    running: dict[int, tuple[int, int, torch.Generator]] = {}  # slot -> (episode id, seed, generator)
    results: list[EpisodeResult] = []

    def start(slot: int) -> None:
        episode_id, seed = todo.pop()
        batch.reset(slot, seed=seed)
        running[slot] = (episode_id, seed, torch.Generator(device).manual_seed(seed_for(seed, 1)))

    for slot in range(min(len(batch), len(todo))):
        start(slot)
    while running:
        for key, group in batch.groups(sorted(running)).items():
            parts = [group] if batched else [[slot] for slot in group]
            for part in parts:
                if greedy is not None:
                    agents = np.array([batch.actors[s].agent_id for s in part], dtype=np.int64)
                    actions, _ = greedy.act(key, batch.stacked(part), True, agents)
                else:
                    actions = _act(policy, batch, key, part, deterministic, [running[s][2] for s in part], device)
                for i, slot in enumerate(part):
                    sub = batch.step(slot, {k: a[i] for k, a in actions.items()})
                    if not sub.episode_ended:
                        continue
                    episode_id, seed, _ = running.pop(slot)
                    summary = sub.summary
                    results.append(
                        EpisodeResult(
                            episode_id, seed, sub.episode_length, sub.episode_return,
                            summary.kpis, summary.records, summary.raw,
                        )
                    )  # fmt: skip
                    if on_episode is not None:
                        on_episode(results[-1])
                    if todo:
                        start(slot)
    return sorted(results, key=lambda r: r.episode_id)


def _act(
    policy: StructuredPolicy,
    batch: EnvBatch,
    key: object,
    slots: list[int],
    deterministic: bool,
    generators: list[torch.Generator],
    device: torch.device,
) -> dict[str, np.ndarray]:
    obs = {k: torch.from_numpy(v).to(device) for k, v in batch.stacked(slots).items()}
    agents = torch.tensor([batch.actors[s].agent_id for s in slots], device=device)
    if deterministic:
        actions, _ = policy.act(key, obs, True, agent_ids=agents)
        return {k: a.cpu().numpy() for k, a in actions.items()}
    logits = policy.logits(key, obs, agent_ids=agents, check_masks=True)
    dist = policy.distribution(key)
    rows = [dist.sample(logits[i : i + 1], False, g) for i, g in enumerate(generators)]
    return {k: torch.cat([r[k] for r in rows]).cpu().numpy() for k in rows[0]}
