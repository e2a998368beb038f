"""One central description of /api/v2's error answers, added to every operation of the OpenAPI
schema (a drf-spectacular postprocessing hook, settings.SPECTACULAR_SETTINGS), so no view has
to list them and none is left undocumented."""

from typing import Any

VALIDATION_ERROR = {
    "type": "object",
    "description": "What was wrong with the request: field name (or `non_field_errors`) to its "
                   "messages, with nested fields as nested objects; or `detail` when the request as "
                   "a whole could not be read (e.g. malformed JSON).",
    "properties": {
        "detail": {"type": "string"},
        "non_field_errors": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": {"anyOf": [{"type": "array"}, {"type": "object"}, {"type": "string"}]},
}
ERROR = {
    "type": "object",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
}
_REF = {"ValidationError": VALIDATION_ERROR, "Error": ERROR}

# Status code: (when it applies, description, schema name)
_ANSWERS = {
    "400": ("input", "Invalid input; the body says which fields and why.", "ValidationError"),
    "401": ("auth", "Not logged in: no valid API token or session.", "Error"),
    "403": ("auth", "Not allowed (e.g. a session request without its CSRF token).", "Error"),
    "404": ("lookup", "No such object of yours.", "Error"),
    "413": ("body", "The request body is over the size limit or the free quota.", "Error"),
    "415": ("body", "The body's media type is not one the operation takes, or not readable as one.", "Error"),
}


def document_errors(result: dict[str, Any], generator: object, request: object, public: bool) -> dict[str, Any]:
    """Add the error answers each operation can give, where the view did not document them;
    every 400 gets the one validation-error schema (views documented it as {"detail"})."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(_REF)
    for path, item in result.get("paths", {}).items():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            applies = {
                "input": "requestBody" in operation
                         or any(p.get("in") == "query" for p in operation.get("parameters", [])),
                # Operations anyone may call list {} among their security requirements, or none.
                "auth": bool(operation.get("security")) and {} not in operation["security"],
                "lookup": "{" in path,
                "body": "requestBody" in operation,
            }
            responses = operation["responses"]
            for code, (when, description, name) in _ANSWERS.items():
                if not applies[when] or (code in responses and code != "400"):
                    continue
                responses[code] = {
                    "description": responses.get(code, {}).get("description") or description,
                    "content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}},
                }
    return result


def document_empty_filters(result: dict[str, Any], generator: object, request: object,
                           public: bool) -> dict[str, Any]:
    """A single-valued choice filter given empty (`?mode=`, as an HTML form sends "any") filters
    nothing; django-filter takes it, so the schema lists "" among the values."""
    for item in result.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict):
                continue
            for param in operation.get("parameters", []):
                schema = param.get("schema", {})
                if param.get("in") == "query" and schema.get("type") == "string" and "enum" in schema:
                    schema["enum"] = ["", *(v for v in schema["enum"] if v != "")]
    return result
