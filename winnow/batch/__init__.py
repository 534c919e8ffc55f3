"""Batch scoring on local processes or Ray, and the HTTP service."""
