import django_filters
from django.db import connections
from django.db.models import QuerySet

from core.pagination import NewestFirstCursorPagination, SortedIfFew

from .models import Job, JobState

# Up to this many jobs matching a name (and the other filters) are sorted for the page (a few ms);
# more are dense enough to be met early on the walk newest first.
FEW_NAME_MATCHES = 2000


class JobFilterSet(django_filters.FilterSet):  # type: ignore[misc]  # django-filter has no types
    name = django_filters.CharFilter(method="filter_name", max_length=100,
                                     label="Only jobs whose name contains this text (any case)")
    # distinct=False: a filter on the job's own column joins nothing, so rows cannot repeat (the
    # default DISTINCT made PostgreSQL sort every matching row before the page's LIMIT).
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices, distinct=False)
    # A choice, not a BooleanFilter: that one ignores a value it cannot read instead of refusing it.
    active = django_filters.TypedChoiceFilter(choices=[("true", "true"), ("false", "false")],
                                              coerce=lambda value: value == "true", method="filter_active",
                                              label="Only jobs that have not ended (true) or only ended ones (false)")

    # Applied by the list's cursor pagination (core.pagination), which must page in that order.
    sort = django_filters.ChoiceFilter(
        choices=[(value, label) for value, (label, _) in NewestFirstCursorPagination.sorts.items()],
        method="sorted_by_pagination", empty_label=None, label="Order: newest (default), oldest, name or -name")

    # Resolved to the datacenter's id first, so PostgreSQL reads the (user, datacenter, newest first)
    # index instead of walking the user's whole history through the join on the name.
    datacenter__name = django_filters.CharFilter(method="filter_datacenter", max_length=100,
                                                 label="Only jobs in the datacenter of this name")

    class Meta:
        model = Job
        fields = ["state", "mode", "datacenter__name"]

    def filter_datacenter(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        from accounts.models import Datacenter

        ids = list(Datacenter.objects.filter(name=value).values_list("pk", flat=True))
        return queryset.filter(datacenter_id=ids[0]) if ids else queryset.none()

    def filter_name(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return queryset.filter(name__icontains=value)

    def filter_queryset(self, queryset: QuerySet[Job]) -> QuerySet[Job] | SortedIfFew:
        filtered: QuerySet[Job] = super().filter_queryset(queryset)
        if not self.form.cleaned_data.get("name") or connections[filtered.db].vendor != "postgresql":
            return filtered
        # PostgreSQL pages a substring match by walking the user's jobs newest first, as if matches
        # were spread evenly; a rare name clustered in the past (a sweep's runs) makes that walk read
        # most of the history. Up to FEW_NAME_MATCHES matches are found through the trigram index
        # (migration 0010), counted and sorted for the page instead (core.pagination.SortedIfFew).
        return SortedIfFew(filtered, FEW_NAME_MATCHES)

    def sorted_by_pagination(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return queryset

    # The value is the coerced bool; drf-spectacular reads its type hint for the parameter's schema,
    # which stays the string choice the URL carries (object: no basic type to map it to).
    def filter_active(self, queryset: QuerySet[Job], name: str, value: object) -> QuerySet[Job]:
        from .models import ACTIVE_STATES

        return queryset.filter(state__in=ACTIVE_STATES) if value else queryset.exclude(state__in=ACTIVE_STATES)
