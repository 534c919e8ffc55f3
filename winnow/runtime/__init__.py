"""Harness runtime: TTL-aware idle compaction, lazy truncation, economics, the context budget."""
