"""An add, from its intake to its stored memories: the ``Intake`` protocol (``intake``),
whether an add can run here (``capability``), what phases run with (``deps``), the
phases (``phases/``) and their per-item fallback (``batch``), the extraction prompts
(``prompts/``) and the readers of chat exports for backfills (``backfill/``)."""
