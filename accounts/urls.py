from django.urls import path

from . import views

app_name = "accounts"
urlpatterns = [
    path("tokens/", views.tokens, name="tokens"),
    path("tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
]
