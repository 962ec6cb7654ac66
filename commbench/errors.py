"""The one exception type that reaches the user as a single line (exit status 2)."""

from .redact import scrub


class CommbenchError(Exception):
    """Bad input or an environment that cannot run the request; the message names cause and fix."""

    exit_code = 2


class NodeError(CommbenchError):
    """A refusal that depends on the machine the command runs on (no GPU visible, ranks on one host
    where several are needed), not on the values it was given: a cluster plan's steps, checked on the
    node accept runs on before they run elsewhere, leave it to the run."""


class UnknownOption(CommbenchError):
    """An option the command does not have (a plan's defaults reach only the commands that have it)."""


class UnknownCommand(CommbenchError):
    """A command a plan's step cannot run: the step's mistake, whichever table's option found it."""


class RankError(CommbenchError):
    """A problem of this rank's own (its launch variables): it says so whatever its rank, where other
    errors are said by rank 0 alone for the whole job."""


def one_line(text: str) -> str:
    """An error message as the single line the user gets, credentials redacted: a library's error may
    quote a setting it was given."""
    return scrub(" ".join(part.strip() for part in str(text).splitlines() if part.strip()))


def described(error: BaseException) -> str:
    """An unexpected failure in the error line's words: a system call's (a full disk) as the system
    says it, with the file it concerned, not as Python names it; anything else with its type, which
    says what failed (TimingDefect, RuntimeError from NCCL)."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror + (f" ({error.filename})" if error.filename else "")
    return f"{type(error).__name__}: {error}"
