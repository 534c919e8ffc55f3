"""Batch jobs: scoring transcripts on local processes or Ray (`score`), and the
context-intelligence benchmark (`winnow.batch.cib`)."""
