"""What reads finished runs: plots (``maze-plot``), the comparison of a sweep's runs and the marl-eval export. It reads
run directories only, never a live run."""
