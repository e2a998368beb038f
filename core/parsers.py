"""The JSON parser of every DRF view (settings.REST_FRAMEWORK). Its own module: the settings
import it while rest_framework.views is still loading."""

from collections.abc import Mapping
from typing import IO, Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

# No request body of ours nests deeper than a few levels; this bounds every later walk of one.
MAX_JSON_DEPTH = 32


class BoundedJSONParser(parsers.JSONParser):
    """DRF's JSON parser refusing bodies nested deeper than MAX_JSON_DEPTH with a 400 (Python's
    parser itself raises RecursionError, a 500, somewhere near 1000 levels)."""

    def parse(self, stream: IO[Any], media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            data = None
        else:
            if _depth_within(data, MAX_JSON_DEPTH):
                return data
        raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels")


def _depth_within(data: object, limit: int) -> bool:
    stack: list[tuple[object, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > limit:
                return False
            stack.extend((v, depth + 1) for v in (value.values() if isinstance(value, dict) else value))
    return True
