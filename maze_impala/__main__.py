from maze_impala.cli import run_command

run_command()
