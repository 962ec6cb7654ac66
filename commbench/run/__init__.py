"""The rank-side harness: run configuration, buffers, the collective / p2p / copy / links / numerics
loops, the iteration policy, the checks before ranks start, and the live output of a run."""
