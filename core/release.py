"""A request's objects freed when its response is made, not left to Python's cycle collector.

Django and DRF link a request's objects in reference cycles: the request and its lazy user,
messages and htmx details; a DRF view and the handler methods it keeps, its request (whose
parser context names it again) and its response (whose renderer context does); every serializer
and its bound fields (each field's `parent`); a prefetched instance and its related rows (each
row's foreign key). Reference counting cannot free a cycle, so all of a request's objects (about
400 for a job detail, 600 for a list page) wait for the cycle collector. Under load, with many
requests in flight, they outlive the young generations' collections and are freed by full
collections, each walking every object the process has: at 32 requests at once, timed with
`gc.callbacks`, 0.6-1.6 ms per job detail and 1.4-2.7 ms per list page went to collections
(0.2 and 0.4 ms once released; load average 5-10).

`release(request, response)` cuts those links once the response is rendered (it runs after the
middleware chain, in the request's thread: core/asgi_django.py), so the objects go as soon as the
response is sent. It only drops references from objects whose work is over: the view, DRF's
request and Django's request (their attributes), the serializers' bound fields (made again if
anything asks for them), the renderer context and the instances' prefetched rows. A streaming
response is left alone: its body is made while it is sent, perhaps from those objects.
tests/test_request_release.py counts what a job detail and a job list leave to the collector.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest
from django.http.response import HttpResponseBase
from rest_framework.serializers import BaseSerializer


def release(request: HttpRequest, response: HttpResponseBase) -> None:
    """Cut the reference cycles among `request`'s objects; `response` keeps what it sends."""
    if response.streaming:
        return
    context = getattr(response, "renderer_context", None)  # a DRF Response's, once rendered
    if isinstance(context, dict):
        response.renderer_context = None  # type: ignore[attr-defined]
        for serializer in _serializers(getattr(response, "data", None)):
            _unbind(serializer)
            _drop_prefetched(serializer.instance)
        for done in (context.get("view"), context.get("request")):
            if done is not None:
                done.__dict__.clear()
    request.close()  # its uploaded files, as Django would when the response is closed
    request.__dict__.clear()


def _serializers(data: Any) -> Iterator[BaseSerializer[Any]]:
    """The serializers of DRF's data (ReturnDict and ReturnList keep theirs), a page's included."""
    serializer = getattr(data, "serializer", None)
    if isinstance(serializer, BaseSerializer):
        yield serializer
    if isinstance(data, dict):
        for value in data.values():
            serializer = getattr(value, "serializer", None)
            if isinstance(serializer, BaseSerializer):
                yield serializer


def _unbind(serializer: BaseSerializer[Any]) -> None:
    """Drop the serializer's bound fields (a cached property: bound again if asked for) and its
    nested serializers' and list child's, each of which names its parent."""
    fields = serializer.__dict__.pop("fields", None)
    serializer.__dict__.pop("_plain_plan", None)  # core.api.PlainFieldsRepresentation's
    for field in (fields or {}).values():
        if isinstance(field, BaseSerializer):
            _unbind(field)
    child = getattr(serializer, "child", None)  # a ListSerializer's
    if isinstance(child, BaseSerializer):
        _unbind(child)
        child.parent = None  # type: ignore[assignment]  # unbound, as a new field is


def _drop_prefetched(instance: Any) -> None:
    """Forget the rows prefetched for the instance(s) (each row names its instance)."""
    for obj in instance if isinstance(instance, list | tuple) else (instance,):
        cache = getattr(obj, "__dict__", {})
        cache.pop("_prefetched_objects_cache", None)
