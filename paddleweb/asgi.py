import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")

import django  # noqa: E402

django.setup(set_prefix=False)

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402  (needs Django set up first)

from accounts.asgi import TokenOrSessionAuth  # noqa: E402
from jobs.routing import websocket_urlpatterns  # noqa: E402
from paddleweb.body_limits import BodyLimit  # noqa: E402
from pfs.asgi_fast import LargeChunkASGIHandler, PfsASGI  # noqa: E402

# HTTP: every body bounded (anonymous ones refused) from the head alone (body_limits.py); then
# Django (responses sent in large messages), with upload chunks sent with a token streamed
# straight to disk in front of it (see pfs/asgi_fast.py).
django_asgi_app = LargeChunkASGIHandler()

application = ProtocolTypeRouter(
    {
        "http": BodyLimit(PfsASGI(django_asgi_app)),
        "websocket": TokenOrSessionAuth(URLRouter(websocket_urlpatterns)),
    }
)
