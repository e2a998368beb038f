"""Django under ASGI with one thread hop per request instead of one per middleware.

Django's ASGI handler builds its middleware chain async: each sync-only middleware (WhiteNoise's)
is wrapped to call back into the event loop, and each MiddlewareMixin middleware below it then
runs its process_request and process_response through `sync_to_async`, each a trip from the
event loop to a thread and back; the (sync) view is one more. Under load those trips queue behind
every other connection on the loop: a dozen per request, most of a job detail's time
(bench/web.py). Here the chain is built sync, as under WSGI, and the whole of it, views
included, runs in the request's one thread (`thread_sensitive`, as Django runs sync views).
Async views still work: the sync chain calls them through `async_to_sync`, as under WSGI. Once the
chain has made the response, in the same thread, the reference cycles among the request's objects
are cut (core/release.py): the handler uses the response alone from then on (`run_get_response`,
`handle`). And the client's disconnect, which the server reports once the response is sent, ends
`listen_for_disconnect` without raising RequestAborted: `handle` ignores that exception, but the
task kept it, and its traceback through `handle`'s frame made a cycle holding all of the request's
objects (Django ticket #36700), in every request served by uvicorn. And a Content-Type that
Django's header parser refuses is answered 400 (`create_request`) rather than the 500 Django
lets it become, on any path.

`get_response_async`, `load_middleware` and `create_request` are methods of Django's handlers,
not documented extension points: PINNED records the source of each in the pinned Django, and
tests/test_library_seams.py fails when an upgrade changes one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler, ASGIRequest
from django.http import HttpRequest, HttpResponseBadRequest, HttpResponseBase

from .asgi_types import Receive
from .release import release

# Django internals this module relies on, as sha256 (first 16 hex digits) of their source in
# the pinned Django (requirements.txt); checked by tests/test_library_seams.py.
PINNED = {
    "django.core.handlers.asgi:ASGIHandler.__init__": "41379d4f4b69f900",
    "django.core.handlers.base:BaseHandler.load_middleware": "a1fb7ee5f8586195",
    "django.core.handlers.base:BaseHandler.get_response": "3d6a79b124c2cccb",
    "django.core.handlers.base:BaseHandler.get_response_async": "ad82c920df0cebbb",
    # after get_response_async they use the response, not the request (core/release.py)
    "django.core.handlers.asgi:ASGIHandler.run_get_response": "0234ea5fe09a5777",
    "django.core.handlers.asgi:ASGIHandler.handle": "98faeb5bef800331",
    # overridden below; `handle` treats its return and its RequestAborted alike
    "django.core.handlers.asgi:ASGIHandler.listen_for_disconnect": "c729aa315c734f98",
    # overridden below; `handle` sends the response it returns in place of a request
    "django.core.handlers.asgi:ASGIHandler.create_request": "5eae59c6696013ff",
}


class SyncChainASGIHandler(ASGIHandler):
    """ASGIHandler whose middleware chain and view run in one thread per request."""

    def __init__(self) -> None:
        super().__init__()
        self.load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = await sync_to_async(self._respond, thread_sensitive=True)(request)
        return response

    def _respond(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        release(request, response)  # its objects are freed once it is sent (core/release.py)
        return response

    def create_request(self, scope: Mapping[str, Any], body_file: IO[bytes]
                       ) -> tuple[ASGIRequest, None] | tuple[None, HttpResponseBase]:
        """Django's, answering 400 where it cannot parse the Content-Type (an RFC 2231 parameter
        in an encoding Python does not know: `boundary*=bogus''x`), which it lets out as a 500."""
        try:
            return super().create_request(scope, body_file)
        except ValueError:
            return None, HttpResponseBadRequest("the Content-Type header cannot be parsed")

    async def listen_for_disconnect(self, receive: Receive) -> None:
        """Django's, returning on the client's disconnect instead of raising RequestAborted."""
        message = await receive()
        if message["type"] != "http.disconnect":  # never happens, as Django says
            raise AssertionError(f"Invalid ASGI message after request body: {message['type']}")
