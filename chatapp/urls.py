from django.contrib import admin
from django.urls import path

from . import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", views.health, name="health"),
    path("", views.index, name="index"),
]
