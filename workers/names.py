"""Explicit task names: the wire contract between producers (API, CLI) and workers."""

HEALTH_TASK = "memq.health"
