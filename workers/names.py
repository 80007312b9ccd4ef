"""Explicit task names: the wire contract between producers (API, CLI) and workers."""

from __future__ import annotations

from pipeline.domain.state import Phase

HEALTH_TASK = "memq.health"
GATHER_TASK = "memq.batch.gather"
CHAT_FLUSH_TASK = "memq.chat.flush"
RECORD_TASK = "memq.job.record_end"
FAILED_TASK = "memq.job.failed"  # fails on purpose: a failed or dead job, red in Flower
PREPARE_TASK = "memq.batch.prepare"
WEBHOOKS_TASK = "memq.job.webhooks"  # one tenant's job webhooks of one batch
REPROCESS_TASK = "memq.reprocess"  # a rebuild of the index versions (workers.reprocess)


def phase_task_name(phase: Phase) -> str:
    return f"memq.job.{phase.value}"
