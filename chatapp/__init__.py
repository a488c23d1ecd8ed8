"""chatapp: the Django project and app. Importing it loads the Celery app so tasks register."""

from .celery import app as celery_app

__all__ = ["celery_app"]
