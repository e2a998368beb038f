"""Every integer /api/v2 takes — in a JSON body, a query string, a header or a path — is bounded.
The integers are found in the published OpenAPI schema, so a new one is checked the day it is
added: the schema states each one's minimum and maximum (clients can see them), and a huge, a
negative or a just-out-of-range value gets a 400 that names the field (in a path, where the
value picks an object, a 404), never a 500."""

import httpx
import pytest
from drf_spectacular.generators import SchemaGenerator

from accounts.services import issue_token
from jobs import services as jobs
from notifications.models import Delivery, Webhook
from pfs import uploads
from tests.support import LiveASGI, make_package, token_client

pytestmark = pytest.mark.django_db

SCHEMA = SchemaGenerator().get_schema(request=None, public=True)
COMPONENTS = SCHEMA["components"]["schemas"]


def _properties(schema: dict) -> dict:
    if "$ref" in schema:
        return _properties(COMPONENTS[schema["$ref"].rsplit("/", 1)[1]])
    out = dict(schema.get("properties", {}))
    for part in schema.get("allOf", []):
        out.update(_properties(part))
    return out


def _integers() -> list[tuple[str, str, str, str, dict]]:
    """(method, path, where, name, schema) of each integer input: parameters, and the top-level
    fields of JSON bodies (the API takes no nested integers: checked below)."""
    found = []
    for path, operations in SCHEMA["paths"].items():
        for method, op in operations.items():
            for param in op.get("parameters", []):
                if param["schema"].get("type") == "integer":
                    found.append((method.upper(), path, param["in"], param["name"], param["schema"]))
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            for name, prop in _properties(body or {}).items():
                assert prop.get("type") != "object" or not prop.get("properties"), (path, name, "nested fields")
                if prop.get("type") == "integer" and not prop.get("readOnly"):
                    found.append((method.upper(), path, "body", name, prop))
    return found


INTEGERS = _integers()
NAMES = [f"{m} {p} {where}:{name}" for m, p, where, name, _ in INTEGERS]


def test_the_sweep_finds_the_integers_the_probe_named():
    assert "POST /api/v2/uploads/ body:size" in NAMES
    assert "GET /api/v2/jobs/{name}/logs/ query:offset" in NAMES and "GET /api/v2/jobs/ query:limit" in NAMES
    assert "PATCH /api/v2/uploads/{upload_id}/ header:Upload-Offset" in NAMES


@pytest.mark.parametrize("method, path, where, name, schema", [i for i in INTEGERS if i[2] != "path"],
                         ids=[n for n, i in zip(NAMES, INTEGERS, strict=True) if i[2] != "path"])
def test_the_schema_states_each_integers_bounds(method, path, where, name, schema):
    assert isinstance(schema.get("minimum"), int) and isinstance(schema.get("maximum"), int)
    assert schema["maximum"] < 2**63  # within every database's integers (and a float's exact range here)


@pytest.fixture
def api(alice):
    """alice's client, with one of each object a path may name (so the path is not the 404)."""
    pkg = make_package(alice, "fit", {"train.py": ""})
    jobs.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1})
    upload = uploads.create(alice, "/pfs/local/home/alice/up.bin", 10)
    hook = Webhook.objects.create(user=alice, url="https://example.com/hook", events=["finished"], secret="s")
    delivery = Delivery.objects.create(webhook=hook, event="finished", payload={})
    client = token_client(alice)
    objects = {"name": "fit", "upload_id": str(upload.pk), "id": str(hook.pk), "delivery_id": str(delivery.pk)}
    return client, objects, pkg


def _base_body(path: str, pkg: str) -> dict:
    """A valid body for each operation that takes integers in one, so only the one field is wrong."""
    return {
        "/api/v2/jobs/": {"name": "other", "package": pkg, "entry": "python train.py"},
        "/api/v2/jobs/{name}/clone/": {"name": "clone"},
        "/api/v2/uploads/": {"path": "/pfs/local/home/alice/new.bin", "size": 1},
        "/api/v2/shares/": {"path": "/pfs/local/home/alice/jobs/fit/train.py"},
    }[path]


def _bad_values(schema: dict) -> list:
    values = [10**30, -(10**30), 2**63, -1]
    if "maximum" in schema:
        values.append(schema["maximum"] + 1)
    if "minimum" in schema:
        values.append(schema["minimum"] - 1)
    return values


@pytest.mark.parametrize("method, path, where, name, schema", INTEGERS, ids=NAMES)
def test_huge_and_negative_integers_get_a_400_naming_the_field(api, method, path, where, name, schema):
    client, objects, pkg = api
    for value in _bad_values(schema):
        url, kwargs = path.format(**objects), {}
        if where == "path":
            url = path.format(**{**objects, name: value})
        elif where == "query":
            assert method == "GET"
            kwargs["data"] = {name: value}
        elif where == "header":
            kwargs[f"HTTP_{name.upper().replace('-', '_')}"] = str(value)
            kwargs.update(data=b"x", content_type="application/offset+octet-stream")
        else:
            kwargs.update(data={**_base_body(path, pkg), name: value}, format="json")
        res = getattr(client, method.lower())(url, **kwargs)
        if where == "path":
            assert res.status_code == 404, (value, res.status_code, res.content[:300])
            continue
        assert res.status_code == 400, (value, res.status_code, res.content[:300])
        errors = res.json()
        assert name in errors or name in errors.get("detail", ""), (value, errors)


@pytest.mark.parametrize("value", ["1" + "0" * 30, "-1", "9" * 5000, "x"])
def test_a_chunk_at_an_out_of_range_offset_gets_a_400_on_the_servers_fast_path_too(transactional_db, alice, value):
    """Through uvicorn with a token, a chunk is written by pfs.asgi_fast, before Django's view."""
    upload = uploads.create(alice, "/pfs/local/home/alice/up.bin", 10)
    with LiveASGI() as live:
        res = httpx.patch(f"{live.url}/api/v2/uploads/{upload.pk}/", content=b"x", timeout=60,
                          headers={"Authorization": f"Token {issue_token(alice)}", "Upload-Offset": value,
                                   "Content-Type": "application/offset+octet-stream"})
    assert res.status_code == 400 and "Upload-Offset" in res.json()["detail"]


@pytest.mark.parametrize("header", ["bytes=0-" + "9" * 30, "bytes=-" + "9" * 30, "bytes=" + "9" * 30 + "-",
                                    "bytes=" + "9" * 5000 + "-", "bytes=-" + "9" * 5000])
def test_a_huge_range_header_is_ignored_or_refused_never_a_500(alice, header):
    """Range, the one integer input outside the schema: a number past any file is unsatisfiable
    (416) or, too long to be one, a malformed header that RFC 9110 lets the server ignore."""
    make_package(alice, "fit", {"train.py": "hello world"})
    res = token_client(alice).get("/api/v2/files/content/", {"path": "/pfs/local/home/alice/jobs/fit/train.py"},
                                  HTTP_RANGE=header)
    assert res.status_code in (200, 206, 416)
    if res.status_code == 206:
        assert res["Content-Range"] == "bytes 0-10/11"
