"""memq's domain: typed models, the ingestion phases, the Elasticsearch store, model adapters."""
