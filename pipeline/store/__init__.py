"""The Elasticsearch store: client construction, index templates, and error translation."""
