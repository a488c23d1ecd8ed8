"""The local stack behind `make run`: one supervisor over every process, and nginx's config."""
