"""What a run says once measured: fits, verdicts against fabrics, comparisons and baselines, scaling
predictions, link matrices, numerics error figures, stragglers."""
