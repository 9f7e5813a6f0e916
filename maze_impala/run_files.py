"""The names of what a run writes into its directory, in one place: every layer reads them from here.

A training run's directory (``outputs/train/<time>``)::

    config.yaml          the resolved config                  train.log        the console and any traceback
    stats.csv            a row of statistics per epoch        tensorboard/     the same, for TensorBoard
    kpis.csv             a row per evaluation episode         kpis_summary.csv the last evaluation's summary
    model_last.pt        the last checkpoint (resumes)        model_best.pt    the best evaluation's
    training_curves.png  stats.csv drawn                      videos/, event_logs/  when asked for

A rollout's writes ``games.csv`` and ``games_summary.csv`` against an opponent; a multirun folder ``summary.csv``,
``summary.png``, ``comparison.png`` and ``metrics.json``.
"""

CONFIG_YAML = "config.yaml"
STATS_CSV = "stats.csv"
KPI_CSV = "kpis.csv"
KPI_SUMMARY_CSV = "kpis_summary.csv"
LAST_MODEL = "model_last.pt"
BEST_MODEL = "model_best.pt"
CURVES_PNG = "training_curves.png"
TENSORBOARD_DIR = "tensorboard"
EVENT_LOG_DIR = "event_logs"
VIDEO_DIR = "videos"
FAILED = "FAILED"
"""The file that marks a run directory whose run failed before its first epoch ended (it holds the error)."""
LOCK_FILE = ".maze_run.lock"
"""Held by the live process that trains into the directory."""
GAMES_CSV = "games.csv"
"""One row per game: seat, outcome, the seat's return, and the episode's id, seed, steps, return and KPIs."""
GAMES_SUMMARY_CSV = "games_summary.csv"
"""One row per seat: games, win, draw and loss rates, mean return."""
SUMMARY_CSV = "summary.csv"
SUMMARY_PNG = "summary.png"
COMPARISON_PNG = "comparison.png"
METRICS_JSON = "metrics.json"
"""A multirun's evaluations in marl-eval's JSON."""
HYDRA_OVERRIDES = ".hydra/overrides.yaml"
"""Where Hydra keeps the overrides of a run it started (a multirun job's name)."""
