import django_filters

from .models import Job, JobState


class JobFilterSet(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains", max_length=100,
                                     label="Only jobs whose name contains this text (any case)")
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)
    # A choice, not a BooleanFilter: that one ignores a value it cannot read instead of refusing it.
    active = django_filters.TypedChoiceFilter(choices=[("true", "true"), ("false", "false")],
                                              coerce=lambda value: value == "true", method="filter_active",
                                              label="Only jobs that have not ended (true) or only ended ones (false)")

    class Meta:
        model = Job
        fields = ["state", "mode", "datacenter__name"]

    def filter_active(self, queryset, name, value):
        from .models import ACTIVE_STATES

        return queryset.filter(state__in=ACTIVE_STATES) if value else queryset.exclude(state__in=ACTIVE_STATES)
