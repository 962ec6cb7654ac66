"""`python -m commbench`: the command line, as the standalone launch starts its ranks."""

from .launch.watchdog import guard_start_up

guard_start_up()  # before the imports that take a rank its first second

from .cli import main  # noqa: E402

main()
