"""The shipped Hydra configs (installed as ``maze_impala.configs``)."""
