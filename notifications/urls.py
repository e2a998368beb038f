from django.urls import path

from . import views

app_name = "notifications"
urlpatterns = [
    path("", views.webhooks, name="webhooks"),
    path("<int:pk>/delete/", views.webhook_delete, name="webhook-delete"),
    path("email/", views.email, name="email"),
]
