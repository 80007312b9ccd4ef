"""The Elasticsearch store by concern: one repository per kind of document (memories,
history, entities, messages, jobs, keys) and one for the documents at large (paged reads and
deletes, health, reset), all over one ``Connection`` (``base.py``). ``ElasticStore``
(``pipeline.store.elastic``) composes them behind the store protocols."""
