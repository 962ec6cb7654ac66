"""commbench: collective-communication microbenchmarks with exact checks and cost-model fits."""

__version__ = "0.1.0"
