"""Policies mapped to agents: which policy network of its step key each agent acts with.

By default the agents of a step key share one network. ``model.per_agent_networks=true`` gives each its own;
``model.agent_groups`` (``{group: [agent names]}``) gives each group of agents one of its own, shared by its
members, and the step key's other agents one more. An agent's name is the env's (a PettingZoo agent name, or
``<step key>_<i>``: see :attr:`~maze_impala.envs.structured.StructuredEnv.agents_dict`). A network is built for
one step key's spaces, so a group whose members act in several step keys gets one network in each.
"""

from __future__ import annotations

from collections.abc import Mapping

from maze_impala.core import ActorID, StepKey


def agent_routes(
    groups: Mapping[str, list[str]],
    per_agent: bool,
    agents: Mapping[str, ActorID],
    counts: Mapping[StepKey, int],
) -> dict[StepKey, list[int]]:
    """Per step key with more than one network: the network of each of its agents (indexed by agent id)."""
    routes: dict[StepKey, list[int]] = {}
    if per_agent:
        for key, count in counts.items():
            if count != 1:
                if count < 1:
                    raise ValueError(
                        f"model.per_agent_networks=true needs a fixed agent count, but step key "
                        f"{key!r} has {count}; use shared networks (per_agent_networks=false) for it"
                    )
                routes[key] = list(range(count))
        return routes
    unknown = sorted({name for members in groups.values() for name in members} - set(agents))
    if unknown:
        raise ValueError(
            f"model.agent_groups names agents this env does not have: {unknown}; its agents: {sorted(agents)}"
        )
    group_of = {agents[name]: group for group, members in groups.items() for name in members}
    for key in dict.fromkeys(actor.step_key for actor in group_of):
        count = counts.get(key, 0)
        if count < 1:
            raise ValueError(f"model.agent_groups needs a fixed agent count, but step key {key!r} has {count}")
        labels = [group_of.get(ActorID(key, agent)) for agent in range(count)]
        order = list(dict.fromkeys(labels))
        if len(order) > 1:
            routes[key] = [order.index(label) for label in labels]
    return routes
