"""The HTTP layer: an httpx client per server (and one for URLs elsewhere), token auth, retries, error mapping.

Idempotent requests (GET, HEAD, PUT, DELETE) are retried with exponential backoff when the
connection fails or the server answers 502/503/504; other requests only when the connection
could not be made at all, so nothing is ever done twice. The retries are tenacity's, imported
only once a request has failed: most commands never retry, and the import cost them about 11 ms
of their start (bench/cli_start.py).
"""

from __future__ import annotations

import re
import ssl
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from . import __version__
from ._httpx import httpx
from .config import TokenCache, normalize_endpoint
from .errors import APIError, AuthError, ConfigError, ConnectionFailed, NotFound

IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
RETRY_STATUS = frozenset({502, 503, 504})
BACKOFF = 0.25  # seconds before the first retry, doubled before each next one (at most MAX_BACKOFF)
MAX_BACKOFF = 8.0
MAX_ANSWER = 64 << 20  # the most of a JSON answer read into memory: a page of 1000 entries is ~0.3 MiB
MAX_ERROR = 64 << 10  # of an error's body: its message is cut to 500 characters anyway
TOKEN_FORM = re.compile(r"[!-~]+")  # what a header carries as it is: printable ASCII, no space
DEFAULT_PORTS = {"http": 80, "https": 443}


# What the API answers for one object. API.request returns the decoded JSON as it comes (Any);
# the callers that know an endpoint answers an object say so with cast(JsonObject, ...).
JsonObject = dict[str, Any]


class _RetryableStatus(Exception):
    def __init__(self, response: httpx.Response):
        self.response = response


def _retryable(method: str) -> Callable[[BaseException], bool]:
    def check(exc: BaseException) -> bool:
        if isinstance(exc, _RetryableStatus):
            return True
        if method in IDEMPOTENT:
            return isinstance(exc, httpx.TransportError)
        # Not idempotent: only when the request cannot have reached the server.
        return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))

    return check


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port or DEFAULT_PORTS.get(parts.scheme.lower())


def read_at_most(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """The decoded body of a streamed `response`, at most `limit` bytes of it, and whether that
    is all of it (else the rest is not read): a server cannot make the client hold more."""
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > limit:
            response.close()
            return bytes(body[:limit]), False
    return bytes(body), True


def _as_read(response: httpx.Response, body: bytes) -> httpx.Response:
    """`response` with `body` (already decoded) as its content."""
    headers = [(k, v) for k, v in response.headers.multi_items()
               if k.lower() not in ("content-encoding", "content-length", "transfer-encoding")]
    return httpx.Response(response.status_code, headers=headers, content=body, request=response.request,
                          extensions=response.extensions)


def error_from(response: httpx.Response) -> APIError:
    try:
        detail: Any = response.json()
    except ValueError:
        text = response.text.strip()
        detail = text[:500] if text and "<html" not in text[:200].lower() else None
    status = response.status_code
    cls = AuthError if status in (401, 403) else NotFound if status == 404 else APIError
    if detail is None:
        return cls(status, None, f"the server answered HTTP {status} {response.reason_phrase}")
    return cls(status, detail)


def tls_context(usercert: str | None = None, userkey: str | None = None,
                cacert: str | None = None) -> ssl.SSLContext | None:
    """The TLS settings of a config entry: a client certificate to present (seed 003's
    usercert/userkey) and a CA to trust instead of the system's; None when neither is given."""
    if not (usercert or cacert):
        return None
    try:
        context = ssl.create_default_context(cafile=cacert)
        if usercert:
            context.load_cert_chain(usercert, userkey)
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(f"cannot load the TLS files of the configuration ({usercert or cacert}): {e}") from None
    return context


def plain_http(endpoint: str) -> bool:
    """Whether requests to `endpoint` go in plain HTTP straight to it: an http:// URL, and no
    HTTP proxy set in the environment (urllib's reading of it, which httpx's starts from)."""
    if urlsplit(endpoint).scheme != "http":
        return False
    proxies = urllib.request.getproxies()
    return not (proxies.get("http") or proxies.get("all"))


class API:
    """Talks to one PaddleCloud server's /api/v2/."""

    def __init__(self, endpoint: str, *, token: str | None = None, username: str | None = None,
                 password: str | None = None, timeout: float = 30.0, retries: int = 4,
                 token_cache: TokenCache | None = None, transport: httpx.BaseTransport | None = None,
                 tls: ssl.SSLContext | None = None):
        self.endpoint = normalize_endpoint(endpoint)
        self.tls = tls
        self.base_url = self.endpoint + "/api/v2/"
        self.username = username
        self._password = password
        self._token = token
        self._token_from_cache = False
        self._cache = token_cache if (password and not token) else None
        self.retries = retries
        self.transport = transport  # a custom one (tests, mounts): transfers go through httpx (wire.py)
        self._timeout = httpx.Timeout(timeout, connect=10.0)
        # Plain HTTP to the endpoint with no proxy: no request on self.http ever does TLS, so it
        # gets a context without the CA bundle, which httpx would load for nothing (OpenSSL 3
        # parses it in 25-40 ms, a third of a command's start); one that trusts nothing, should
        # TLS happen after all. A URL elsewhere (a `next` link to another origin) goes through a
        # client made as for any endpoint (_client_for).
        self.plain = tls is None and transport is None and plain_http(self.endpoint)
        self.http = self._client(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT) if self.plain
                                 else tls if tls is not None else True)  # httpx's default: True
        self._elsewhere: httpx.Client | None = None

    def _client(self, verify: ssl.SSLContext | bool) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=self._timeout,
                            headers={"User-Agent": f"paddlectl/{__version__}", "Accept": "application/json"},
                            transport=self.transport, follow_redirects=False, verify=verify)

    def _client_for(self, url: str) -> httpx.Client:
        if not self.plain or "://" not in url or url.startswith(self.endpoint + "/"):
            return self.http
        if self._elsewhere is None:
            self._elsewhere = self._client(True)
        return self._elsewhere

    # --- auth -----------------------------------------------------------------------------
    @property
    def _cache_key(self) -> str:
        return f"{self.username}@{self.endpoint}"

    def obtain_token(self, username: str, password: str, name: str | None = None) -> str:
        """Exchange a username and password for an API token (POST auth/token/); a `name`d
        token replaces the one the server holds under that name."""
        body = {"username": username, "password": password, **({"name": name} if name else {})}
        response = self._send("POST", "auth/token/", json=body, auth=False)
        return str(response.json()["token"])

    def _auth_header(self) -> dict[str, str]:
        if not self._token and self._password:
            if not self.username:
                raise AuthError(401, None, "the configuration has a password but no username")
            cached = self._cache.get(self._cache_key) if self._cache else None
            if cached:
                self._token, self._token_from_cache = cached, True
            else:
                self._token = self.obtain_token(self.username, self._password)
                if self._cache:
                    self._cache.put(self._cache_key, self._token)
        if self._token and not TOKEN_FORM.fullmatch(self._token):
            # said without the token: an error message must not show it (httpx's would)
            raise ConfigError("the API token has characters an HTTP header cannot carry (a space or a newline "
                              "pasted with it?): set it again")
        return {"Authorization": f"Token {self._token}"} if self._token else {}

    def websocket(self, path: str) -> tuple[str, dict[str, str]]:
        """The URL of the server's websocket `path` (e.g. `ws/jobs/<name>/`) and the headers
        that authenticate on it."""
        scheme, rest = self.endpoint.split("://", 1)
        return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/{path}", {
            **self._auth_header(), "User-Agent": f"paddlectl/{__version__}"}

    # --- requests -------------------------------------------------------------------------
    def _attempts(self, method: str, attempt: Callable[[], httpx.Response]) -> httpx.Response:
        """`attempt()`, and again while it fails in a way `_retryable` allows, up to `retries`
        more times, BACKOFF seconds after the first failure and twice as long after each next."""
        try:
            return attempt()
        except Exception as e:
            if self.retries < 1 or not _retryable(method)(e):
                raise
        from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

        time.sleep(BACKOFF)
        for retry in Retrying(stop=stop_after_attempt(self.retries), reraise=True,
                              wait=wait_exponential(multiplier=2 * BACKOFF, max=MAX_BACKOFF),
                              retry=retry_if_exception(_retryable(method))):
            with retry:
                return attempt()
        raise AssertionError("unreachable: tenacity stops by reraising the last failure")

    def _send(self, method: str, path: str, *, auth: bool = True, stream: bool = False,
              headers: dict[str, str] | None = None, **kwargs: Any) -> httpx.Response:
        method = method.upper()

        # The token goes only where the endpoint is: a `next` link elsewhere (or over plain http
        # from an https endpoint) is fetched without it.
        own = "://" not in path or origin(path) == origin(self.endpoint)

        def attempt() -> httpx.Response:
            hdrs = {**(self._auth_header() if auth and own else {}), **(headers or {})}
            http = self._client_for(path)
            response = http.send(http.build_request(method, path, headers=hdrs, **kwargs), stream=True)
            if response.status_code in RETRY_STATUS:
                body, _ = read_at_most(response, MAX_ERROR)  # the last one is the error shown
                response.close()
                raise _RetryableStatus(_as_read(response, body))
            return response

        try:
            response = self._attempts(method, attempt)
        except _RetryableStatus as e:
            response = e.response
        except httpx.TransportError as e:
            raise ConnectionFailed(f"cannot reach {self.endpoint}: {e or type(e).__name__}") from None
        if response.status_code == 401 and auth and self._token_from_cache and self._password:
            # A cached token that was revoked: get a fresh one, once.
            response.close()
            if self._cache:
                self._cache.put(self._cache_key, None)
            self._token, self._token_from_cache = None, False
            return self._send(method, path, auth=auth, stream=stream, headers=headers, **kwargs)
        if response.status_code == 401 and auth and not self._token and not self._password:
            response.close()
            raise AuthError(401, None, f"{self.endpoint} wants you to log in: the configuration has no password or "
                            "token for it (run `paddlectl login`, or add `password:` to its entry)")
        if response.status_code >= 400:
            body, _ = read_at_most(response, MAX_ERROR)
            response.close()
            raise error_from(_as_read(response, body))
        if stream:
            return response
        body, whole = read_at_most(response, MAX_ANSWER)
        response.close()
        if not whole:
            raise APIError(response.status_code, None, f"the server's answer to {method} {path} is over "
                           f"{MAX_ANSWER >> 20} MiB: not read")
        return _as_read(response, body)

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send a request; returns the decoded JSON body (None for an empty body)."""
        response = self._send(method, path, **kwargs)
        if not response.content:
            return None
        try:
            return response.json()
        except ValueError:
            raise APIError(response.status_code, None,
                           f"the server sent a non-JSON answer to {method} {path}") from None

    def get(self, url: str, /, **params: Any) -> Any:
        """GET `url` (relative to /api/v2/) with query parameters; None values are left out."""
        return self.request("GET", url, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, json: Any = None, **kwargs: Any) -> Any:
        return self.request("POST", path, json=json, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Any:
        return self.request("DELETE", path, **kwargs)

    def paginate(self, url: str, /, **params: Any) -> Iterator[Any]:
        """Every item of a list endpoint, following each page's `next` link (a cursor or limit/offset)."""
        params = {k: v for k, v in params.items() if v is not None}
        page = self.request("GET", url, params=params)
        while True:
            if not isinstance(page, dict) or "results" not in page:
                yield from page or []
                return
            yield from page["results"]
            if not page.get("next"):
                return
            page = self.request("GET", page["next"])

    @contextmanager
    def stream(self, method: str, path: str, **kwargs: Any) -> Iterator[httpx.Response]:
        response = self._send(method, path, stream=True, **kwargs)
        try:
            yield response
        finally:
            response.close()

    def close(self) -> None:
        self.http.close()
        if self._elsewhere is not None:
            self._elsewhere.close()

    def __enter__(self) -> API:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
