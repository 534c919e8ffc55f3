"""Batch scoring on local processes or Ray, and benchmarks."""
