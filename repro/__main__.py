from repro.cli import main

main()
