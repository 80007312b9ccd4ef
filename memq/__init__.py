"""memq: a self-hosted memory layer for AI agents."""

__version__ = "0.1.0"
