"""The pagination of every /api/v2 list (settings.REST_FRAMEWORK): DRF's limit/offset, except
that a bad `limit` or `offset` is refused with a 400 instead of silently replaced."""

from rest_framework import pagination
from rest_framework.exceptions import ValidationError

MAX_OFFSET = 2**31 - 1  # far past any list of ours, and within every database's integers


class StrictLimitOffsetPagination(pagination.LimitOffsetPagination):
    max_limit = 1000

    def get_limit(self, request):
        return self._bounded(request, self.limit_query_param, 1, self.max_limit, self.default_limit)

    def get_offset(self, request):
        return self._bounded(request, self.offset_query_param, 0, MAX_OFFSET, 0)

    def _bounded(self, request, name: str, low: int, high: int, default: int) -> int:
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

    def get_schema_operation_parameters(self, view):
        bounds = {self.limit_query_param: (1, self.max_limit), self.offset_query_param: (0, MAX_OFFSET)}
        params = super().get_schema_operation_parameters(view)
        for param in params:
            low, high = bounds[param["name"]]
            param["schema"] = {**param["schema"], "minimum": low, "maximum": high}
        return params
