"""Batch scoring on local processes or Ray, the HTTP service, and benchmarks."""
