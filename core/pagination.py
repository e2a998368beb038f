"""The pagination of the /api/v2 lists. Most take DRF's limit/offset (settings.REST_FRAMEWORK);
lists that grow without bound (jobs) walk a cursor instead, so a page costs the same at the
100,000th job as at the first. Either way a bad `limit`, `offset` or `cursor` is refused with a
400 naming it instead of being silently replaced."""

import binascii
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import connections
from django.db.models import F, Model, QuerySet
from django.http import HttpRequest
from django.utils.dateparse import parse_datetime
from rest_framework import pagination
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.pagination import Cursor
from rest_framework.request import Request
from rest_framework.views import APIView

MAX_OFFSET = 2**31 - 1  # far past any list of ours, and within every database's integers
MAX_LIMIT = 1000
PAGE_SIZE: int = settings.REST_FRAMEWORK["PAGE_SIZE"]


def bounded_int(request: Request, name: str, low: int, high: int, default: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError({name: ["must be a whole number"]}) from None
    if not low <= value <= high:
        raise ValidationError({name: [f"must be between {low} and {high}"]})
    return value


def with_bounds(params: list[dict[str, Any]], bounds: dict[str, tuple[int, int]]) -> list[dict[str, Any]]:
    for param in params:
        if param["name"] in bounds:
            low, high = bounds[param["name"]]
            param["schema"] = {**param["schema"], "minimum": low, "maximum": high}
    return params


class StrictLimitOffsetPagination(pagination.LimitOffsetPagination):
    max_limit = MAX_LIMIT

    def get_limit(self, request: Request) -> int:
        return bounded_int(request, self.limit_query_param, 1, MAX_LIMIT, self.default_limit or PAGE_SIZE)

    def get_offset(self, request: Request) -> int:
        return bounded_int(request, self.offset_query_param, 0, MAX_OFFSET, 0)

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        return with_bounds(super().get_schema_operation_parameters(view),
                           {self.limit_query_param: (1, MAX_LIMIT), self.offset_query_param: (0, MAX_OFFSET)})


class NewestFirstCursorPagination(pagination.CursorPagination):
    """Newest first by `created`, `id` breaking ties, for a model with an index on
    (owner, -created, -id): every page is one index range scan, and there is no COUNT.
    A cursor marks a row, so jobs submitted while a client walks the list neither repeat nor
    skip rows. `limit` keeps its limit/offset meaning; `offset` is refused: follow `next`.
    `?sort=` picks another of `sorts`, each led by an indexed field that is unique per owner or
    ends in `id` (an unknown value is the filterset's error, or the default on a page)."""

    ordering = ("-created", "-id")
    sorts: dict[str, tuple[str, tuple[str, ...]]] = {
        "newest": ("newest first", ("-created", "-id")), "oldest": ("oldest first", ("created", "id")),
        "name": ("name A-Z", ("name", "id")), "-name": ("name Z-A", ("-name", "-id"))}

    def get_ordering(self, request: Request, queryset: QuerySet[Any], view: APIView | None) -> tuple[str, ...]:
        sort = self.sorts.get(request.query_params.get("sort", ""))
        return sort[1] if sort else self.ordering
    page_size_query_param: str | None = "limit"
    max_page_size = MAX_LIMIT
    invalid_cursor = "not a cursor of this list: use the `next` or `previous` link as given"

    def paginate_queryset(self, queryset: QuerySet[Any], request: Request,  # type: ignore[override]
                          view: APIView | None = None) -> list[Any] | None:
        if "offset" in request.query_params:
            raise ValidationError({"offset": ["this list pages with a cursor: follow the `next` link"]})
        return super().paginate_queryset(queryset, request, view)

    def get_page_size(self, request: Request) -> int:
        default = self.page_size or PAGE_SIZE
        if self.page_size_query_param is None:
            return default
        return bounded_int(request, self.page_size_query_param, 1, MAX_LIMIT, default)

    def decode_cursor(self, request: Request) -> Cursor | None:
        encoded = request.query_params.get(self.cursor_query_param)
        try:
            # DRF's decoding skips characters outside base64, so "%%%" would read as the first page.
            if encoded is not None and not binascii.a2b_base64(encoded.encode("ascii"), strict_mode=True):
                raise ValueError("empty")
            cursor = super().decode_cursor(request)
        except (NotFound, ValueError, UnicodeError):
            raise ValidationError({self.cursor_query_param: [self.invalid_cursor]}) from None
        # The position goes into a query as the sort field's value: an unreadable one is the
        # client's error, not a 500.
        if cursor is not None and cursor.position is not None:
            position = str(cursor.position)
            readable = _is_datetime(position) if self.ordering[0].lstrip("-") == "created" else "\x00" not in position
            if not readable:
                raise ValidationError({self.cursor_query_param: [self.invalid_cursor]})
        return cursor

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        return with_bounds(super().get_schema_operation_parameters(view), {"limit": (1, MAX_LIMIT)})


class FirstPage:
    """Stands in for the queryset given to NewestFirstCursorPagination.paginate_queryset when the
    request asks for the first page at the default order and size: the paginator reads that page
    as `queryset.order_by(*ordering)[0:size + 1]`, and that one chain is answered by `fetch` (a
    prepared statement: core/prepared.py), not by compiling the queryset's SQL again, which was a
    fifth of a job list's CPU. Any other use (another order, a cursor's filter, another slice) is
    the queryset's own, so it gets what it got before."""

    def __init__(self, queryset: QuerySet[Any], ordering: tuple[str, ...], size: int,
                 fetch: Callable[[], list[Any]], ordered: bool = False) -> None:
        self._queryset, self._ordering, self._size, self._fetch, self._ordered = (
            queryset, ordering, size, fetch, ordered)

    def _real(self) -> QuerySet[Any]:
        return self._queryset.order_by(*self._ordering) if self._ordered else self._queryset

    def order_by(self, *fields: str) -> Any:
        if not self._ordered and fields == self._ordering:
            return FirstPage(self._queryset, self._ordering, self._size, self._fetch, ordered=True)
        return self._real().order_by(*fields)

    def __getitem__(self, key: Any) -> Any:
        if self._ordered and key == slice(0, self._size + 1, None):
            return self._fetch()
        return self._real()[key]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real(), name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._real())

    def __len__(self) -> int:
        return len(self._real())


class SortedIfFew:
    """Stands in for a queryset given to NewestFirstCursorPagination.paginate_queryset whose filter
    PostgreSQL pages by walking an index in page order, expecting the matches spread evenly: a
    substring of the name, found through a trigram index, that a sweep's runs share far in the
    past makes that walk read most of the history. The page the paginator reads (`order_by(...)`,
    a cursor's `filter(...)`, then a slice) is read in two queries instead. The first reads the
    keys of up to `cap` + 1 matching rows through the filter's own index, counts them and sorts
    them in page order (`SELECT pk, COUNT(*) OVER () FROM (... LIMIT cap + 1) ORDER BY ... LIMIT
    page`): the page's ids, and whether there were more. The second reads those rows whole, so the
    other matches are neither read twice nor joined to their datacenter. Past `cap` matches,
    which the walk meets early, the slice is the queryset's own; so is any other use of it."""

    def __init__(self, queryset: QuerySet[Any], cap: int, ordering: tuple[str, ...] = ()) -> None:
        self._queryset, self._cap, self._ordering = queryset, cap, ordering

    def order_by(self, *fields: str) -> "SortedIfFew":
        return SortedIfFew(self._queryset.order_by(*fields), self._cap, fields)

    def filter(self, *args: Any, **kwargs: Any) -> "SortedIfFew":
        return SortedIfFew(self._queryset.filter(*args, **kwargs), self._cap, self._ordering)

    def __getitem__(self, key: Any) -> Any:
        if (isinstance(key, slice) and key.step is None and isinstance(key.stop, int)
                and 0 <= (key.start or 0) <= key.stop and self._ordering
                and all(isinstance(f, str) and f.lstrip("-") and "?" not in f for f in self._ordering)):
            return self._page(key.start or 0, key.stop)
        return self._queryset[key]

    def _page(self, start: int, stop: int) -> list[Any]:
        qs = self._queryset
        connection = connections[qs.db]
        name = connection.ops.quote_name
        keys = {f"pc_k{i}": F(field.lstrip("-")) for i, field in enumerate(self._ordering)}
        matches = qs.order_by().values(pc_pk=F("pk"), **keys)[:self._cap + 1]
        try:
            sql, params = matches.query.get_compiler(using=matches.db).as_sql()
        except EmptyResultSet:  # a filter that matches nothing (`.none()`)
            return []
        order = ", ".join(f"m.{name(f'pc_k{i}')} {'DESC' if field.startswith('-') else 'ASC'}"
                          for i, field in enumerate(self._ordering))
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT m.{name('pc_pk')}, COUNT(*) OVER () FROM ({sql}) m ORDER BY {order} "
                           "LIMIT %s OFFSET %s", (*params, stop - start, start))
            rows = cursor.fetchall()
        # Past the cap, or past the end of the rows counted (which there may have been more of).
        if (rows and rows[0][1] > self._cap) or (not rows and start > 0):
            return list(qs[start:stop])
        ids = [row[0] for row in rows]
        found = {obj.pk: obj for obj in qs.filter(pk__in=ids).order_by()} if ids else {}
        return [found[pk] for pk in ids if pk in found]  # one changed meanwhile may no longer match

    def __getattr__(self, name: str) -> Any:
        return getattr(self._queryset, name)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._queryset)

    def __len__(self) -> int:
        return len(self._queryset)


def _is_datetime(text: str) -> bool:
    try:
        return "\x00" not in text and parse_datetime(text) is not None
    except ValueError:  # well formed but out of range, e.g. month 13
        return False


_M = TypeVar("_M", bound=Model)


@dataclass
class CursorPage(Generic[_M]):
    items: list[_M]
    older: str  # "?<query>" of the next (older) page, or "" at the end
    newer: str  # "?<query>" of the previous (newer) page, or "" on the first page


def cursor_page(queryset: QuerySet[_M], request: HttpRequest, page_size: int) -> CursorPage[_M]:
    """One page of `queryset` for a dashboard page, with the API's cursor. An unreadable cursor
    (a hand-edited URL) shows the first page, as the page's filters ignore what they cannot read."""
    paginator = NewestFirstCursorPagination()
    paginator.page_size, paginator.page_size_query_param = page_size, None
    query = request.GET.copy()
    query.pop("offset", None)
    try:
        items = paginator.paginate_queryset(queryset, _with_query(request, query))
    except ValidationError:
        query.pop(paginator.cursor_query_param, None)
        items = paginator.paginate_queryset(queryset, _with_query(request, query))
    return CursorPage(items=list(items or []), older=_relative(paginator.get_next_link()),
                      newer=_relative(paginator.get_previous_link()))


def _with_query(request: HttpRequest, query: Any) -> Request:
    copy = HttpRequest()
    copy.path, copy.GET = request.path, query
    copy.META = {**request.META, "QUERY_STRING": query.urlencode()}  # the links are built from it
    return Request(copy)


def _relative(link: str | None) -> str:
    return "?" + urlsplit(link).query if link else ""
