"""One Hydra composition per ``maze-run`` command.

Hydra's ``@hydra.main`` composes a command's config twice: first with every override, only to read ``hydra.mode``
(whether the config asks for a multirun), then again for the run itself. Each composition of ``conf_train`` takes
about 0.6 s on a 2-core machine, a fifth of a short training run's start-up. Where nothing can set ``hydra.mode``,
the mode is what the command line says (``-m``/``--multirun`` or not), so the first composition is skipped.

What could set it, and keeps Hydra's own reading: a ``hydra.mode`` override, and a config directory of the user's
(``--config-dir``, ``--config-path``), whose configs may set anything. The shipped configs set no ``hydra.mode``
(tests/test_startup.py checks it, and that a run composes once).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

USER_CONFIGS = ("-cd", "--config-dir", "-cp", "--config-path")
"""Options that add configs the package does not ship."""


def mode_is_the_command_lines(argv: Sequence[str]) -> bool:
    """Whether ``hydra.mode`` can only be what the command line's ``-m`` says: no override names it, and only the
    shipped configs are composed."""
    for arg in argv:
        if arg.split("=", 1)[0] in USER_CONFIGS:
            return False
        if "=" in arg and arg.split("=", 1)[0].lstrip("+~") == "hydra.mode":
            return False
    return True


def _no_mode_in_the_config(self: Any, config_name: str | None, overrides: list[str]) -> None:
    """``Hydra.get_mode`` where no config sets ``hydra.mode``: none, so the command line decides."""
    return None


def compose_once(argv: Sequence[str]) -> bool:
    """Skip Hydra's composition for ``hydra.mode`` in this process where the command line decides the mode; whether
    it is skipped. Hydra versions without ``Hydra.get_mode`` keep their own way."""
    from hydra._internal.hydra import Hydra

    if not mode_is_the_command_lines(argv) or not hasattr(Hydra, "get_mode"):
        return False
    Hydra.get_mode = _no_mode_in_the_config
    return True
