"""The one exception type that reaches the user as a single line (exit status 2)."""


class CommbenchError(Exception):
    """Bad input or an environment that cannot run the request; the message names cause and fix."""

    exit_code = 2
