from commprof.cli import main

main()
