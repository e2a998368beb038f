"""Querysets compiled to SQL once per process, each use binding new values to the same statement.

Django compiles a queryset's SQL afresh every time it runs one: for the job detail's four queries
(the token, the job with its related rows, its replicas with their newest usage, its events) that
compiling was about a third of the request's CPU (bench/web.py), for queries whose text never
changes, only their values. `Prepared(build, int, str)` calls `build` once with a placeholder
value of each type, compiles the queryset it returns, and records where each placeholder lands
among the statement's parameters; `fetch(values...)` then runs that statement with the values in
their places and builds the model instances exactly as the queryset would (Django's own
ModelIterable: select_related rows, deferred fields and annotations included).

A placeholder must reach the statement unchanged (an exact match on a text or integer column): a
lookup that rewrites its value (`icontains`, a `Lower`) is refused when the query is prepared,
not silently given the wrong value. The statement is compiled on the first use, against the
database alias the queryset reads from. A prepared queryset cannot be refined (`.filter()` on it
raises): its statement is fixed.

This drives Django's compiler past its public API (it hands ModelIterable a compiler whose SQL is
already made): PINNED records the source of every internal it relies on, and
tests/test_library_seams.py fails when an upgrade changes one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from django.db import connections
from django.db.models import Model, QuerySet
from django.db.models.sql import Query
from django.db.models.sql.compiler import SQLCompiler

# Django internals this module relies on, as sha256 (first 16 hex digits) of their source in
# the pinned Django (requirements.txt); checked by tests/test_library_seams.py.
PINNED = {
    # it takes the compiler from query.get_compiler and reads select, klass_info and
    # annotation_col_map off it after execute_sql
    "django.db.models.query:ModelIterable.__iter__": "c2a744b8c18e0b4a",
    # a reverse foreign key's manager answers all() from _prefetched_objects_cache (with_related)
    "django.db.models.fields.related_descriptors:create_reverse_many_to_one_manager": "3d4329019191b419",
    # they read the statement from self.as_sql() and the columns from the state as_sql left
    "django.db.models.sql.compiler:SQLCompiler.execute_sql": "c1be0e0faedcb93e",
    "django.db.models.sql.compiler:SQLCompiler.results_iter": "d279d61b80a3a115",
}

M = TypeVar("M", bound=Model)

# Values no caller passes: a placeholder is found among the statement's parameters by equality.
_PLACEHOLDERS: dict[type, Callable[[int], Any]] = {
    int: lambda i: -(2**62) - i,
    str: lambda i: f"\x00prepared-placeholder-{i}\x00",
}


class _Statement:
    """A compiled statement: its SQL, its parameters with the placeholders' positions, and the
    compiler that made it (the columns and the instances' layout, which ModelIterable reads)."""

    def __init__(self, compiler: SQLCompiler, sql: str, params: list[Any], slots: list[tuple[int, int]]) -> None:
        self.compiler, self.sql, self.params, self.slots = compiler, sql, params, slots

    def bind(self, connection: Any, values: tuple[Any, ...]) -> SQLCompiler:
        params = list(self.params)
        for position, index in self.slots:
            params[position] = values[index]
        compiler = object.__new__(type(self.compiler))
        compiler.__dict__.update(self.compiler.__dict__)
        compiler.connection = connection
        statement = (self.sql, tuple(params))
        # execute_sql asks as_sql for the statement; the rest of the compiler's state is as
        # as_sql left it when the statement was compiled.
        compiler.as_sql = lambda *args, **kwargs: statement  # type: ignore[method-assign]
        return compiler


class _BoundQuery(Query):
    """The query of a prepared queryset: its compiler has the statement made, with the values bound."""

    _statement: _Statement
    _values: tuple[Any, ...]

    def get_compiler(self, using: str | None = None, connection: Any = None, elide_empty: bool = True) -> Any:
        return self._statement.bind(connection if connection is not None else connections[using or "default"],
                                    self._values)

    def clone(self) -> Query:
        # A refined prepared queryset (.filter(), .order_by()...) would still run the prepared
        # statement, ignoring the refinement: refused, not answered wrong.
        raise TypeError("a prepared queryset cannot be refined or copied; build a new queryset for that")


class Prepared(Generic[M]):
    """`Prepared(lambda user_id, name: Job.objects.filter(user_id=user_id, name=name), int, str)`;
    `.fetch(7, "job-1")` is that queryset for those values, evaluated, its SQL compiled once."""

    def __init__(self, build: Callable[..., QuerySet[M]], *types: type) -> None:
        for kind in types:
            if kind not in _PLACEHOLDERS:
                raise TypeError(f"a prepared query takes int and str values, not {kind.__name__}")
        self._build, self._types = build, types
        self._compiled: tuple[str, _Statement] | None = None  # (database alias, statement), on first use
        self._lock = threading.Lock()

    def _compile(self, template: QuerySet[M]) -> _Statement:
        placeholders = [_PLACEHOLDERS[kind](i) for i, kind in enumerate(self._types)]
        compiler = template.query.get_compiler(using=template.db)
        sql, params = compiler.as_sql()
        slots = []
        for position, param in enumerate(params):
            for index, placeholder in enumerate(placeholders):
                if param == placeholder:
                    slots.append((position, index))
                elif isinstance(param, str) and isinstance(placeholder, str) and placeholder in param:
                    raise ValueError(f"a prepared query's value #{index} is rewritten by its lookup: {param!r}")
        missing = set(range(len(placeholders))) - {index for _, index in slots}
        if missing:
            raise ValueError(f"a prepared query's values {sorted(missing)} do not reach its SQL unchanged")
        return _Statement(compiler, sql, list(params), slots)

    def _statement(self) -> tuple[str, _Statement]:
        if self._compiled is None:
            with self._lock:
                if self._compiled is None:
                    template = self._build(*(_PLACEHOLDERS[kind](i) for i, kind in enumerate(self._types)))
                    self._compiled = (template.db, self._compile(template))
        return self._compiled

    def queryset(self, *values: Any) -> QuerySet[M]:
        """The queryset for `values`, not yet evaluated (evaluating it runs the prepared statement)."""
        if len(values) != len(self._types):
            raise TypeError(f"a prepared query takes {len(self._types)} values, got {len(values)}")
        for value, kind in zip(values, self._types, strict=True):
            if type(value) is not kind:
                raise TypeError(f"a prepared query's value {value!r} is not a {kind.__name__}")
        db, statement = self._statement()
        query = object.__new__(_BoundQuery)
        query.__dict__.update(statement.compiler.query.__dict__)
        query._statement, query._values = statement, values
        qs: QuerySet[M] = QuerySet(model=query.model, query=query, using=db)
        return qs

    def fetch(self, *values: Any) -> QuerySet[M]:
        """The queryset for `values`, evaluated (its rows are in it: iterating it queries no more)."""
        qs = self.queryset(*values)
        len(qs)
        return qs


def with_related(instance: Model, **related: QuerySet[Any]) -> None:
    """Give `instance` its reverse foreign keys' rows as prefetch_related would (`job.replicas.all()`
    answers from them, querying nothing; each row's foreign key to `instance` is `instance`), from
    querysets fetched otherwise (prepared ones: prefetch_related compiles its own)."""
    cache = instance.__dict__.setdefault("_prefetched_objects_cache", {})
    for name, rows in related.items():
        field = getattr(instance, name).field  # the foreign key on the related model
        for row in rows:
            setattr(row, field.name, instance)
        cache[field.remote_field.cache_name] = rows
