"""What memq reaches outside itself through: the OpenAI-compatible LLM (``llm/``), the
embedders (``embedding/``), the local text processing (``nlp/``), Redis errors
translated (``redis_errors``) and the reachability checks (``health``). They import
from ``pipeline`` only ``config``, ``errors``, the domain and one another."""
