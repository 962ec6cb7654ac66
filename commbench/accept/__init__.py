"""Acceptance of a node or a cluster: a plan (TOML) of steps, each a commbench command run as a user
types it, judged against the baseline of the node's SKU, a fabric's expectation or absolute limits;
the verdicts written for people (summary.md/html) and for CI (JUnit, summary.json)."""
