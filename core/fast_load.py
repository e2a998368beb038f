"""Model instances loaded from the database without Model.__init__.

A job list builds 100 model instances per request (50 jobs and their datacenters), and Django's
Model.__init__ sets each column through setattr and its descriptor, sends pre_init and post_init,
and from_db first pads the values of deferred columns: a fifth of a list's CPU (bench/web.py).
Model.from_db is Django's documented hook for customizing loading; `FastLoad.from_db` gives the
instance the loaded columns' values straight in its __dict__ (where Model.__init__ leaves them,
through the default descriptors, and where a deferred column is absent) and the state from_db
gives it. It does so only where that is all __init__ would do: no pre_init or post_init receiver
for the model, and every column's descriptor one of Django's plain ones (a field with a descriptor
of its own that transforms what is set, e.g. a file field, takes Django's way).

PINNED records the Django source this equivalence relies on; tests/test_library_seams.py fails
when an upgrade changes it, and tests/test_fast_load.py compares instances loaded both ways.
"""

from __future__ import annotations

import inspect
from collections.abc import Collection
from typing import Any, Self

from django.db.models import Model
from django.db.models.base import ModelState
from django.db.models.fields.related_descriptors import ForeignKeyDeferredAttribute
from django.db.models.query_utils import DeferredAttribute
from django.db.models.signals import post_init, pre_init

# Django internals this module relies on, as sha256 (first 16 hex digits) of their source in the
# pinned Django (requirements.txt); checked by tests/test_library_seams.py.
PINNED = {
    # what an instance made from positional values holds: _state and the values by attname
    "django.db.models.base:Model.__init__": "2950c3a90d8343b5",
    "django.db.models.base:Model.from_db": "eba347895d11fa79",
    # a column's value is read from, and a deferred one found missing in, the instance's __dict__
    "django.db.models.query_utils:DeferredAttribute.__get__": "65a82ffcdfba4d27",
    "django.db.models.fields.related_descriptors:ForeignKeyDeferredAttribute.__set__": "fd92fb6cd862a96a",
}

def _plain(cls: type[Model]) -> bool:
    """Whether Model.__init__ would only put each column's value in the instance's __dict__
    (worked out once per model)."""
    plain: bool | None = cls.__dict__.get("_fast_load_plain")
    if plain is None:
        plain = cls.__init__ is Model.__init__ and all(
            type(inspect.getattr_static(cls, f.attname, None)) in (DeferredAttribute, ForeignKeyDeferredAttribute)
            for f in cls._meta.concrete_fields)
        cls._fast_load_plain = plain  # type: ignore[attr-defined]
    return plain


class FastLoad:
    """Mixed into a model (before models.Model): its instances loaded from the database skip
    Model.__init__ where that changes nothing (see the module's docstring)."""

    @classmethod
    def from_db(cls, db: str | None, field_names: Collection[str], values: Collection[Any], **kwargs: Any) -> Self:
        model: Any = cls
        # an option a later Django passes (fetch_mode) is Django's to handle
        if kwargs or not _plain(model) or pre_init.has_listeners(model) or post_init.has_listeners(model):
            made: Self = super().from_db(db, field_names, values, **kwargs)  # type: ignore[misc]
            return made
        new = object.__new__(cls)
        # ModelIterable gives the loaded columns' attnames and values in the same order; a deferred
        # column has no value and, as with Model.__init__, no key.
        new.__dict__.update(zip(field_names, values, strict=True))
        state = new._state = ModelState()  # type: ignore[attr-defined]
        state.adding, state.db = False, db
        return new
