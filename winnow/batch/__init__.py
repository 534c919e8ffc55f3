"""Batch scoring on local processes or Ray."""
