"""Exceptions raised by the SDK. The CLI turns every one of them into a message and exit code 1."""

from __future__ import annotations

from typing import Any


class PaddlectlError(Exception):
    """Base class: something the user can read and act on (never needs a traceback)."""


class ConfigError(PaddlectlError):
    """The client configuration (~/.paddle/config or the environment) is missing or wrong."""


class APIError(PaddlectlError):
    """The server answered with an error. `detail` is its JSON body, when it sent one."""

    def __init__(self, status: int, detail: Any = None, message: str | None = None):
        self.status = status
        self.detail = detail
        super().__init__(message or format_detail(detail) or f"the server answered HTTP {status}")

    @property
    def field_errors(self) -> dict[str, list[str]]:
        """`{"name": ["..."]}` for a validation error (HTTP 400), else {}."""
        if isinstance(self.detail, dict):
            return {str(k): _as_list(v) for k, v in self.detail.items() if k != "detail"}
        return {}


class NotFound(APIError):
    """HTTP 404: the job, registry or file does not exist (or is not yours)."""


class AuthError(APIError):
    """HTTP 401/403: the token or password was refused."""


class ConnectionFailed(PaddlectlError):
    """The server could not be reached (after retrying)."""


def _as_list(value: Any) -> list[str]:
    if isinstance(value, list):
        out: list[str] = []
        for item in value:
            out.extend(_as_list(item) if isinstance(item, (list, dict)) else [str(item)])
        return out
    if isinstance(value, dict):
        return [f"{k}: {m}" for k, v in value.items() for m in _as_list(v)]
    return [str(value)]


def format_detail(detail: Any) -> str:
    """Render a DRF error body: {"detail": "..."} as is, {"name": ["..."]} as "name: ..."."""
    if detail is None or detail == "":
        return ""
    if isinstance(detail, str):
        return detail.strip()
    if isinstance(detail, list):
        return "\n".join(_as_list(detail))
    if isinstance(detail, dict):
        lines = []
        for key, value in detail.items():
            for message in _as_list(value):
                if key in ("detail", "non_field_errors", "__all__", "message", "error"):
                    lines.append(message)
                else:
                    lines.append(f"{key}: {message}")
        return "\n".join(lines)
    return str(detail)
