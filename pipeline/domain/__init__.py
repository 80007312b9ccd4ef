"""The domain's types, imported by every other part of ``pipeline``: what callers send and
the deterministic ids (``models``), the seams to the model adapters (``protocols``),
the job as callers see it (``jobs``), what a job knows phase by phase (``state``) and
when a memory is true (``validity``). Nothing here imports another part of
``pipeline`` but ``errors``."""
