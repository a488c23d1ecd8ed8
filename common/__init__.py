"""Pieces shared by the Django project and the inference service (no Django, no torch)."""
