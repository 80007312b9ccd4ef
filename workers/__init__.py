"""Celery adapters: the app built from Settings and one thin task per pipeline phase."""
