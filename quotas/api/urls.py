"""Included by paddleweb/api_urls.py under /api/v2/."""

from django.urls import path

from .views import quota

urlpatterns = [path("quota/", quota, name="quota")]
