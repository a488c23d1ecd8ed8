from django.apps import AppConfig


class ChatappConfig(AppConfig):
    name = "chatapp"
    verbose_name = "Chat"

    def ready(self):
        # Connects the sign-in limit's receiver of user_login_failed; the module imports auth's
        # backends, which need the app registry, so it cannot be imported before now.
        from . import login_limit  # noqa: F401
