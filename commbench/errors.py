"""The one exception type that reaches the user as a single line (exit status 2)."""


class CommbenchError(Exception):
    """Bad input or an environment that cannot run the request; the message names cause and fix."""

    exit_code = 2


class RankError(CommbenchError):
    """A problem of this rank's own (its launch variables): it says so whatever its rank, where other
    errors are said by rank 0 alone for the whole job."""


def one_line(text: str) -> str:
    """An error message as the single line the user gets."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())
