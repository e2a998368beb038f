from django.urls import path

from . import views

app_name = "notifications"
urlpatterns = [
    path("", views.webhooks, name="webhooks"),
    path("<int:pk>/delete/", views.webhook_delete, name="webhook-delete"),
    path("<int:pk>/edit/", views.webhook_edit, name="webhook-edit"),
    path("<int:pk>/test/", views.webhook_test, name="webhook-test"),
    path("deliveries/<int:pk>/redeliver/", views.redeliver, name="redeliver"),
    path("email/", views.email, name="email"),
]
