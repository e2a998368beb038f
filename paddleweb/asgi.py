import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")

import django

django.setup(set_prefix=False)

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402  (needs Django set up first)
from django.conf import settings  # noqa: E402
from django.db import connections  # noqa: E402

from accounts.asgi import TokenOrSessionAuth, credentials_valid  # noqa: E402
from core.body_limits import BodyLimit  # noqa: E402
from core.request_slots import RequestSlots  # noqa: E402
from core.request_threads import ThreadPerRequest  # noqa: E402
from core.startup import freeze_startup_heap  # noqa: E402
from jobs.routing import websocket_urlpatterns  # noqa: E402
from legacy.asgi import LegacyChunks  # noqa: E402
from paddleweb.prometheus import SLOT_WAIT  # noqa: E402
from pfs.asgi_fast import PfsASGI, streams_body  # noqa: E402
from pfs.asgi_responses import LargeChunkASGIHandler, ZeroCopyResponses  # noqa: E402

# HTTP: every body bounded (anonymous ones refused) from the head alone (core/body_limits.py); then
# Django (file bodies by zero-copy send, others in large messages: pfs/asgi_responses.py), with
# upload chunks sent with a token streamed straight to disk in front of it (pfs/asgi_fast.py; the
# legacy client's chunks: legacy/asgi.py).
# The middleware chain and view run in one thread per request (core/asgi_django.py), a thread kept for later
# requests (core/request_threads.py), whose database connection, if it kept one, is closed when it ends.
django_asgi_app = ZeroCopyResponses(LargeChunkASGIHandler())

request_threads = ThreadPerRequest(BodyLimit(LegacyChunks(PfsASGI(django_asgi_app)), authenticated=credentials_valid,
                                             streamed=streams_body), on_end=connections.close_all)

freeze_startup_heap()

application = ProtocolTypeRouter(
    {
        # a few requests at once, the rest waiting without a thread (core/request_slots.py)
        "http": RequestSlots(request_threads, settings.WEB_REQUEST_SLOTS, waited=SLOT_WAIT.observe),
        "websocket": TokenOrSessionAuth(URLRouter(websocket_urlpatterns)),
    }
)
