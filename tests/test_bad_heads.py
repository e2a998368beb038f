"""Request heads Django itself cannot parse, sent to the real application served by uvicorn with
the Procfile's protocol: each is a 400 on any path, never a 500 (core/asgi_django.py)."""

import httpx
import pytest

from accounts.services import issue_token
from tests.support import LiveASGI

pytestmark = pytest.mark.django_db(transaction=True)

# An RFC 2231 parameter in an encoding Python does not know: Django's parser raises ValueError.
ODD_TYPE = "multipart/form-data; boundary*=bogus''%41"


@pytest.fixture
def live():
    with LiveASGI() as live:
        yield live


@pytest.mark.parametrize("method, path", [
    ("GET", "/api/v2/registries/"),
    ("POST", "/api/v2/registries/"),
    ("GET", "/api/v1/jobs/"),
    ("POST", "/api/v1/file/"),
    ("POST", "/api/v1/pfs/storage/chunks"),
    ("GET", "/jobs/"),
])
def test_a_content_type_django_cannot_parse_is_a_400_on_any_path(live, alice, method, path):
    token = issue_token(alice, name="cli")
    r = httpx.request(method, f"http://127.0.0.1:{live.port}{path}", content=b"--A\r\n\r\n--A--\r\n", timeout=60,
                      headers={"Authorization": f"Token {token}", "Content-Type": ODD_TYPE})
    assert r.status_code == 400, r.text[:300]
