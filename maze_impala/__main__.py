from maze_impala.cli import main

main()
