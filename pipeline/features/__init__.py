"""Slices of the product over the domain, the store and the serving side: export and
import (``export``, ``export_read``), erasure (``erase``), chat-platform events
(``chat``) and job webhooks (``webhook``), rebuilds (``reprocess``, ``reextract``),
provenance, usage per tenant and its Redis ledger (``usage``, ``usage_redis``), the
operators' explorer (``explorer``) and the mem0 platform's entities and feedback
(``platform``)."""
