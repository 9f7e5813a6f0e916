"""What acts, for whom, against whom: multi-agent play between ``nn/`` (networks and actings) and ``actors/``.

- :mod:`~maze_impala.play.spec`: :class:`~maze_impala.play.spec.PolicySpec` (a model record and its weights,
  picklable), the resolution of opponent names, and :func:`~maze_impala.play.spec.load_acting`;
- :mod:`~maze_impala.play.games`: a game's outcome and score for a seat, and its events;
- :mod:`~maze_impala.play.pool`: the snapshot pool, the learner's half and the actors' half, with PFSP;
- :mod:`~maze_impala.play.lineup`: the routing of agents to the trained policy and its opponent.

``play/`` imports ``nn/``, ``envs/``, ``config/``, ``core`` and ``events/``' interfaces, never ``actors/`` or
``train/``; ``nn/``, ``envs/`` and ``events/`` never import it.
"""
