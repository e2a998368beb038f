from django.urls import path

from .consumers import JobConsumer

websocket_urlpatterns = [path("ws/jobs/<str:name>/", JobConsumer.as_asgi())]
