"""What the serving side answers with: hybrid search (``search``, what it asks and answers
in ``search_models``, the maths of ``fusion`` and ``currency``, ``multihop``,
``replies``, ``rerank``, a search's ``rounds`` and its ``search_cost``), the filter
language (``filters``), reading and changing memories (``crud``, ``listing``), listing
jobs (``job_listing``) and the API keys (``keys``)."""
