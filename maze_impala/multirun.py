"""The Hydra callback that sums up a multirun (``maze-run -m ...``) when it ends: see :mod:`maze_impala.report.compare`.

It lives outside ``maze_impala.train``, a name the package binds to the function ``train``: Hydra finds a callback
by walking attributes."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback


class Summary(Callback):
    """Writes ``summary.csv``, ``summary.png``, ``comparison.png`` and marl-eval's ``metrics.json`` into the multirun
    folder after its last job, and names the best configuration's folders."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        # an Optuna study stored in the sweep's folder (hydra/sweeper=impala_search) needs the folder before any job
        Path(config.hydra.sweep.dir).mkdir(parents=True, exist_ok=True)
        logging.getLogger("alembic").setLevel(logging.WARNING)  # the study's database set-up, line by line

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        from maze_impala.report.compare import best_row, plot_comparison, summarise
        from maze_impala.report.marl_eval import write_marl_eval
        from maze_impala.run_files import COMPARISON_PNG, METRICS_JSON

        folder = Path(config.hydra.sweep.dir)
        try:
            written = summarise([folder], folder)
            if written is not None:
                plot_comparison([folder], folder / COMPARISON_PNG)
                write_marl_eval([folder], folder / METRICS_JSON)
                print(
                    f"maze-run: the multirun's summary: {written}, {written.with_suffix('.png')}, "
                    f"{folder / 'comparison.png'}, "
                    f"{folder / METRICS_JSON} (marl-eval)"
                )
                if (best := best_row(written)) is not None:
                    print(f"maze-run: {best} (under {folder})")
        except Exception as error:  # a summary must never turn finished runs into a failure
            logging.getLogger("maze_impala").warning("could not sum up the multirun %s: %r", folder, error)
