from channels.security.websocket import WebsocketDenier
from django.urls import path, re_path

from .consumers import JobConsumer

websocket_urlpatterns = [
    path("ws/jobs/<slug:name>/", JobConsumer.as_asgi()),  # job names are DNS labels
    # Any other path is refused with a close, not an unrouted-path error.
    re_path(r"", WebsocketDenier.as_asgi()),
]
