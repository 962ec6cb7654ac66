"""links at host level: the rounds (schedule), their judgement under noise (verdicts), both for any
measurer, real ranks or a model (level), and the result section with its verdict lines (report)."""
