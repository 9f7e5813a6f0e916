"""Running a policy outside training: the evaluator, the games of multi-agent envs, videos and the rollout CLI
(``maze-run -cn conf_rollout``)."""
