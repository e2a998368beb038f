from channels.security.websocket import WebsocketDenier
from django.urls import path, re_path

from . import converters  # noqa: F401 (registers <jobname:>)
from .live.consumers import JobConsumer

websocket_urlpatterns = [
    path("ws/jobs/<jobname:name>/", JobConsumer.as_asgi()),
    # Any other path is refused with a close, not an unrouted-path error.
    re_path(r"", WebsocketDenier.as_asgi()),
]
