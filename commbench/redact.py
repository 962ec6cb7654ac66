"""Credentials out of whatever commbench writes: result files, logs and its error lines. A library's
message may quote a setting it was given (gloo's "Unable to find address for: <GLOO_SOCKET_IFNAME>"),
so a value that the recorded environment redacts must not come back through an error."""

import re

# Values shaped like credentials, whatever the variable's name: a URL's user:password, a query
# parameter or a setting named like a secret (password=... or password: ..., at the start or after
# , ; & ? = : a space, a quote or an opening bracket, as a library's message quotes a setting), and the shapes of
# well-known keys (GitHub and Slack tokens, AWS access key ids, JSON web tokens, PEM private keys).
# Each is replaced by REDACTED; the rest of the value (a host, a port, a tuning setting beside it)
# stays.
REDACTED = "<redacted>"
_SECRET_SHAPES = [
    (re.compile(r"(?P<keep>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@"), r"\g<keep>" + REDACTED + "@"),
    (re.compile(r"(?P<keep>(?:^|[?&;,=:'\"(\[\s])(?:[A-Za-z0-9_.-]*(?:token|key|secret|password|passwd|pwd|auth|sig|"
                r"signature|credential)[A-Za-z0-9_.-]*)\s*(?:=|:)\s*)[^&;,#\s'\")\]]*", re.IGNORECASE),
     r"\g<keep>" + REDACTED),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|xox[abprs]-[A-Za-z0-9-]{10,}|"
                r"(?:AKIA|ASIA)[0-9A-Z]{16}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})\b"), REDACTED),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.DOTALL), REDACTED),
]


def scrub(value: str) -> str:
    """value with every credential-shaped part replaced by REDACTED."""
    for pattern, replacement in _SECRET_SHAPES:
        value = pattern.sub(replacement, value)
    return value
