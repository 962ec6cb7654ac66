"""Credentials out of whatever commbench writes: result files, logs and its error lines. A library's
message may quote a setting it was given (gloo's "Unable to find address for: <GLOO_SOCKET_IFNAME>"),
so a value that the recorded environment redacts must not come back through an error."""

import re

# Values shaped like credentials, whatever the variable's name: a URL's user:password, a setting or
# parameter named like a secret, and the shapes of well-known keys (GitHub, GitLab and Slack tokens,
# AWS access key ids, JSON web tokens, PEM private keys). A named one is `password=...`,
# `password: ...`, `"password": "..."` (a quoted name or value: JSON, Python, a shell), `--password
# ...` (a command line's flag) or `Authorization: Bearer ...`, at the start or after , ; & ? = : a
# space, a quote, an opening bracket (as a library's message quotes a setting) or a slash (a folder
# of a path named so). Each credential is
# replaced by REDACTED; the rest of the value (a host, a port, a tuning setting beside it, a quote)
# stays.
REDACTED = "<redacted>"
# "pass" as the last word of a name (UCX_PASS, db.pass), not inside another (BYPASS) nor before
# another (--pass-pct, a threshold); "sig" in lower case alone (a URL's sig=, not PCI-SIG).
_WORDS = r"(?:token|key|secret|password|passwd|passphrase|pwd|auth|(?-i:sig)|signature|cred|cookie|(?<![a-z])pass(?![\w.-]))"
_NAME = rf"[A-Za-z0-9_.-]*{_WORDS}[A-Za-z0-9_.-]*"
# A quoted value is redacted up to its closing quote (a space inside it included), a bare one up to
# the first separator.
_VALUE = r"(?:\"(?P<dq>[^\"]*)\"|'(?P<sq>[^']*)'|(?P<bare>[^&;,#\s'\")\]}]*))"
_NAMED = re.compile(rf"(?P<keep>(?:^|[?&;,=:'\"(\[{{\s/])['\"]?{_NAME}['\"]?\s*(?:=|:)\s*(?:(?:Bearer|Basic|Digest|Token)\s+)?)"
                    rf"{_VALUE}", re.IGNORECASE)
_FLAG = re.compile(rf"(?P<keep>(?:^|\s)--?{_NAME}\s+){_VALUE}", re.IGNORECASE)
_SHAPES = [
    (re.compile(r"(?P<keep>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@"), r"\g<keep>" + REDACTED + "@"),
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}|xox[abprs]-[A-Za-z0-9-]{6,}|"
                r"(?:AKIA|ASIA)[0-9A-Z]{16}|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})\b"), REDACTED),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.DOTALL), REDACTED),
]


def _named(m: re.Match) -> str:
    """The name (and any quote) kept, the value redacted."""
    if m["dq"] is not None:
        return f'{m["keep"]}"{REDACTED}"'
    if m["sq"] is not None:
        return f"{m['keep']}'{REDACTED}'"
    return m["keep"] + REDACTED


def scrub(value: str) -> str:
    """value with every credential-shaped part replaced by REDACTED."""
    for pattern, replacement in _SHAPES:
        value = pattern.sub(replacement, value)
    return _FLAG.sub(_named, _NAMED.sub(_named, value))


def secret_name(name: str) -> bool:
    """Whether a variable's or a setting's name says that it holds a credential (UCX_PASSWORD,
    GLOO_AUTH_TOKEN, NCCL_..._KEY, UCX_PASS), whatever library it belongs to."""
    return re.search(_WORDS, name.lower()) is not None  # lowered: a variable's SIG is a name's sig


def scrub_all(value):
    """value (JSON-like: dicts, lists, strings, numbers) with every string scrubbed; keys kept."""
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: scrub_all(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_all(v) for v in value]
    return value
