from cdlaw.cli import main

main()
