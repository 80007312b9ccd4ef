"""memq's HTTP API: thin FastAPI handlers over ``pipeline``."""
