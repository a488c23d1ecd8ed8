from django.apps import AppConfig


class ChatappConfig(AppConfig):
    name = "chatapp"
    verbose_name = "Chat"

    def ready(self):
        # Connects the sign-in limit's receiver of user_login_failed, and the receivers that tell
        # a user's streams of a password change or a sign-out (session_end_signals.py); the
        # modules import auth's backends and the user model, which need the app registry, so
        # they cannot be imported before now.
        from . import login_limit  # noqa: F401
        from .streaming import session_end_signals  # noqa: F401
