"""/api/v1 given crafted input that valid JSON or HTTP allows but no service can take: numbers
beyond a float's range, text PostgreSQL cannot store (NUL) or no database can encode (lone
surrogates), multipart heads Django's header parser refuses, and registry fields /api/v2 refuses.
Each is answered with the endpoint's usual refusal, never a 500 (run on PostgreSQL too:
DATABASE_URL=postgres://...)."""

import pytest

from jobs.models import Job

from .conftest import BOUNDARY
from .test_chunk_upload import chunk_body

A = "/pfs/local/home/alice"
SURROGATE = "Surrogate characters are not allowed: U+D800."
NUL = "Null characters are not allowed."
INFINITE = "numbers must be finite"


def send_raw(c, method: str, path: str, body: bytes):
    """The body as written (json= would escape nothing the way a crafted client can)."""
    return c.send(method, path, content=body, headers={"Content-Type": "application/json"})


@pytest.mark.parametrize(
    "method, path, body, msg",
    [
        ("POST", "/api/v1/jobs/", b'{"name": "x", "pservers": 1e400, "entry": "python a.py"}', f"pservers: {INFINITE}"),
        ("POST", "/api/v1/jobs/", b'{"name": "x", "cpu": -1e400, "entry": "python a.py"}', f"cpu: {INFINITE}"),
        (
            "POST",
            "/api/v1/jobs/",
            b'{"name": "x", "entry": "python a.py", "registry": "\\ud800"}',
            f"registry: {SURROGATE}",
        ),
        ("POST", "/api/v1/jobs/", b'{"name": "x", "entry": "python a.py", "registry": "r\\u0000"}', f"registry: {NUL}"),
        ("DELETE", "/api/v1/jobs/", b'{"jobname": "\\ud800"}', f"jobname: {SURROGATE}"),
        ("DELETE", "/api/v1/jobs/", b'{"jobname": "j\\u0000"}', f"jobname: {NUL}"),
        ("DELETE", "/api/v1/registry/", b'{"name": "\\ud800"}', f"name: {SURROGATE}"),
        (
            "POST",
            "/api/v1/registry/",
            b'{"name": "ab", "server": "\\ud800", "username": "u", "password": "p"}',
            f"server: {SURROGATE}",
        ),
    ],
)
def test_unusable_numbers_and_text_in_a_json_field_are_refused_in_the_envelope(
    old_client, alice, method, path, body, msg
):
    r = send_raw(old_client(alice), method, path, body)
    assert (r.status_code, r.json()) == (200, {"code": 400, "msg": msg})
    assert not Job.objects.exists() and not alice.registries.exists()


@pytest.mark.parametrize(
    "body, err",
    [
        (b'{"method": "touch", "filesize": 1e400, "path": "/pfs/local/home/alice/t"}', f"filesize: {INFINITE}"),
        (b'{"method": "touch", "filesize": 5, "path": "/pfs/local/home/alice/\\ud800"}', f"path: {SURROGATE}"),
        (
            b'{"method": "mkdir", "path": ["/pfs/local/home/alice/ok", "/pfs/local/home/alice/\\ud800"]}',
            f"path: {SURROGATE}",
        ),
    ],
)
def test_unusable_values_in_a_pfs_command_are_refused_in_its_envelope(old_client, alice, settings, body, err):
    r = send_raw(old_client(alice), "POST", "/api/v1/pfs/files", body)
    assert (r.status_code, r.json()) == (200, {"err": err, "results": None})
    assert not (settings.PFS_ROOT / "local/home/alice/ok").exists()  # refused before any of it was done


@pytest.mark.parametrize(
    "body, errors",
    [
        (b'{"username": "\\ud800", "password": "x"}', {"username": [SURROGATE]}),
        (b'{"username": "alice\\u0000", "password": "password"}', {"username": [NUL]}),
    ],
)
def test_a_login_with_unusable_text_is_a_400_naming_the_field_as_v2s(old_client, alice, body, errors):
    c = old_client()
    r = send_raw(c, "POST", "/api-token-auth/", body)
    assert (r.status_code, r.json()) == (400, errors)
    v2 = send_raw(c, "POST", "/api/v2/auth/token/", body)
    assert (v2.status_code, v2.json()) == (400, errors)


def test_a_chunk_part_whose_filename_django_cannot_parse_is_refused_as_a_chunk_without_its_part(old_client, alice):
    body = chunk_body(f"{A}/t", 0, b"xxxx", 4096).replace(b'filename="', b"filename*=bogus''%41; x=\"")
    assert b"filename*=bogus''%41" in body
    r = old_client(alice).send(
        "POST",
        "/api/v1/pfs/storage/chunks",
        content=body,
        headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"},
    )
    assert (r.status_code, r.json()) == (200, {"err": "send the chunk as the multipart part 'chunk'", "results": None})


@pytest.mark.parametrize(
    "fields",
    [
        {"server": "s" * 300, "username": "u" * 500, "password": "p"},
        {"server": "registry.example.com", "username": True, "password": ["x"]},
        {"server": "registry.example.com", "username": {"u": 1}, "password": None},
        {"server": "registry.example.com", "username": "u\x00", "password": "p\x00"},
    ],
)
def test_registry_add_refuses_what_v2_refuses_with_v2s_field_errors(old_client, alice, alice_api, fields):
    body = {"name": "pcloud-registry-r1", **fields}
    v2 = alice_api.post("/api/v2/registries/", body, format="json")
    assert v2.status_code == 400
    r = old_client(alice).send("POST", "/api/v1/registry/", json=body)
    assert r.status_code == 200
    assert r.json() == {
        "code": 400,
        "msg": "\n".join(f"{field}: {m}" for field, messages in v2.json().items() for m in messages),
    }
    assert not alice.registries.exists()


def test_registry_add_stores_what_v2_stores(old_client, alice, alice_api):
    fields = {"server": " registry.example.com:5000 ", "username": " u ", "password": " secret "}
    assert alice_api.post("/api/v2/registries/", {"name": "v2", **fields}, format="json").status_code == 201
    r = old_client(alice).send("POST", "/api/v1/registry/", json={"name": "pcloud-registry-v1", **fields})
    assert r.json() == {"code": 200, "msg": ""}
    v1, v2 = alice.registries.get(name="pcloud-registry-v1"), alice.registries.get(name="v2")
    assert (v1.server, v1.username, v1.password) == (v2.server, v2.username, v2.password)
