"""Placeholder until this reader lands."""

READER = None
