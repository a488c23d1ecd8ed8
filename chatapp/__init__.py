"""chatapp: the Django project and app. Importing it loads the Celery app so tasks register.

The conversation core lives here: its rows (models), the writes (services/) and reads
(selectors) of them, request input and its errors (error_views: Django's error answers, JSON
under /api/), the sign-in limit (login_limit); and the doors that tie the rooms together
(api, views, urls, admin, tasks, settings, asgi, celery). The rooms are streaming/, upstream/,
staff/ and runtime/, each saying in its `__init__` what it may import; ARCHITECTURE.md draws the
arrows, and tests/test_architecture.py holds them.
"""

from .celery import app as celery_app

__all__ = ["celery_app"]
