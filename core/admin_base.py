"""What every ModelAdmin of the operators' console shares."""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib import admin
from django.contrib.admin.filters import SimpleListFilter
from django.db.models import Model
from django.http import HttpRequest

_M = TypeVar("_M", bound=Model)


class StrictLookupsAdmin(admin.ModelAdmin[_M]):
    """A changelist's query string filters only on what its sidebar and date bar offer. Django
    takes a lookup on any local field (`?env__contains=`, `?name__regex=(`, `?secret__startswith=`):
    some are a 500 on one database or the other, others probe a secret's stored column."""

    def lookup_allowed(self, lookup: str, value: Any, request: HttpRequest) -> bool:
        offered = {self.date_hierarchy} if self.date_hierarchy else set()
        for item in self.get_list_filter(request):
            if isinstance(item, type) and issubclass(item, SimpleListFilter):
                offered.add(item.parameter_name or "")
            else:
                offered.add(str(item[0] if isinstance(item, (list, tuple)) else item))
        first = lookup.split("__", 1)[0]
        if not any(first == name.split("__", 1)[0] for name in offered if name):
            return False
        return super().lookup_allowed(lookup, value, request)
