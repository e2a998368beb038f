"""Hostile input to the job surfaces gets a clear 4xx with the field at fault, never a 500, and
creates nothing: out-of-range numbers, deep JSON, oversized environments, bad log offsets,
bad page parameters, unroutable websocket paths, and kills racing deletes."""

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from accounts.services import issue_token
from jobs import services
from jobs.live import logstore
from jobs.models import Job
from jobs.spec import MAX_ENV_BYTES, MAX_ENV_VARS, MAX_TIMEOUT
from pfs.usage import recompute
from quotas.models import Quota
from tests.support import LiveASGI, make_package


@pytest.fixture
def pkg(alice):
    return make_package(alice, "fit", {"train.py": ""})


def submit(api, pkg, **fields):
    body = {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1, "trainers": 1, **fields}
    return api.post("/api/v2/jobs/", body, format="json")


@pytest.mark.django_db
@pytest.mark.parametrize("field,value,message", [
    ("timeout", 10**20, f"at most {MAX_TIMEOUT}"),
    ("timeout", 0, "at least 1"),
    ("passes", 10**20, "at most"),
    ("gpu", 10**20, "at most"),
    ("trainers", 10**20, "at most"),
    ("pservers", 10**20, "at most"),
    ("cpu", "1" * 30, "at most 20 characters"),
    ("memory", "9" * 30 + "Gi", "at most 20 characters"),
    ("env", {f"K{i}": "v" for i in range(10_000)}, f"at most {MAX_ENV_VARS} variables"),
    ("env", {"BIG": "x" * 2**20}, f"at most {MAX_ENV_BYTES // 1024} KiB"),
    ("env", {"A-B": "x"}, "not a valid environment variable name"),
    ("env", {"A\n": "x"}, "not a valid environment variable name"),  # '$' alone would match before a newline
    ("env", {"PADDLE_PFS_HOME": "/"}, "cannot be overridden"),
    ("env", {"PADDLE_CHECKPOINT_DIR": "/tmp"}, "cannot be overridden"),
    # what the Kubernetes backend sets and reads back (the pod's index, its name, a built runtime)
    ("env", {"PADDLECLOUD_INDEX": "0"}, "cannot be overridden"),
    ("env", {"PADDLECLOUD_POD_NAME": "x"}, "cannot be overridden"),
    ("env", {"PADDLECLOUD_RUNTIME_READY": "1"}, "cannot be overridden"),
])
def test_out_of_range_job_fields_get_a_field_error(alice_api, pkg, field, value, message):
    res = submit(alice_api, pkg, **{field: value})
    assert res.status_code == 400, res.content[:300]
    assert message in res.json()[field][0]
    assert not Job.objects.exists()


@pytest.mark.django_db
def test_the_documented_environment_limits_are_accepted(alice_api, pkg):
    env = {f"K{i:02}": "x" * (MAX_ENV_BYTES // MAX_ENV_VARS - 3) for i in range(MAX_ENV_VARS)}
    res = submit(alice_api, pkg, env=env)
    assert res.status_code == 201, res.json()
    assert Job.objects.get().env == env


@pytest.mark.django_db
@pytest.mark.parametrize("depth", [33, 100_000])
def test_deeply_nested_json_is_refused_with_400(alice_api, depth):
    res = alice_api.post("/api/v2/jobs/", "[" * depth + "]" * depth, content_type="application/json")
    assert res.status_code == 400
    assert "nested deeper than 32 levels" in res.json()["detail"]


@pytest.mark.django_db
def test_json_nested_within_the_limit_reaches_validation(alice_api, pkg):
    nested = "x"
    for _ in range(30):
        nested = [nested]
    res = submit(alice_api, pkg, env={"A": nested})
    assert res.status_code == 400 and "env" in res.json()


@pytest.mark.django_db
def test_a_share_expiring_beyond_ten_years_is_refused(alice, alice_api):
    make_package(alice, "fit", {"train.py": ""})
    res = alice_api.post("/api/v2/shares/", {"path": "/pfs/local/home/alice/jobs/fit/train.py",
                                             "expires_in": 10**12}, format="json")
    assert res.status_code == 400 and "expires_in" in res.json()


@pytest.mark.django_db
@pytest.mark.parametrize("query,field", [
    ("offset=" + str(10**30), "offset"), ("offset=-5", "offset"), ("offset=abc", "offset"),
    ("lines=-1", "lines"), ("lines=abc", "lines"), ("lines=" + str(10**9), "lines"),
])
def test_bad_log_offsets_and_line_counts_are_refused(alice_api, pkg, query, field):
    assert submit(alice_api, pkg).status_code == 201
    res = alice_api.get(f"/api/v2/jobs/fit/logs/?{query}")
    assert res.status_code == 400 and field in res.json(), res.content


@pytest.mark.django_db
def test_an_offset_past_the_end_reads_nothing_from_there(alice_api, pkg):
    submit(alice_api, pkg)
    logstore.append(Job.objects.get().replicas.get(role="trainer"), b"hello\n")
    res = alice_api.get("/api/v2/jobs/fit/logs/?replica=trainer-0&offset=1000")
    assert res.status_code == 200
    assert res.json()[0] | {"state": None} == {"replica": "trainer-0", "text": "", "offset": 1000,
                                               "next_offset": 1000, "state": None, "notice": ""}


@pytest.mark.django_db
@pytest.mark.parametrize("lines", ["abc", "-1", str(10**30)])
def test_the_log_page_refuses_a_bad_line_count(client, alice, pkg, lines):
    services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1})
    client.force_login(alice)
    res = client.get(f"/jobs/fit/logs/trainer-0/?lines={lines}")
    assert res.status_code == 400
    assert b"lines:" in res.content


@pytest.mark.django_db
def test_a_user_whose_storage_is_full_cannot_submit_by_form_or_api(client, alice, alice_api, datacenter):
    pkg = make_package(alice, "fit", {"train.py": "print('hi')\n"})
    datacenter.quotas.update(storage_bytes=5)
    recompute(alice, datacenter)

    res = submit(alice_api, pkg)
    assert res.status_code == 400 and res.json()["storage"] == ["quota exceeded: used 12 B of 5 B"]
    # The form has no "storage" field: the error shows above it.
    client.force_login(alice)
    form = {"name": "fit", "datacenter": "local", "mode": "ps", "source": "pfs", "package": pkg,
            "entry": "python train.py", "trainers": 1, "pservers": 1, "cpu": "1", "memory": "1Gi", "gpu": 0,
            "pscpu": "1", "psmemory": "1Gi", "passes": 1, "env": "", "image": "", "registry": ""}
    res = client.post("/jobs/new/", form)
    assert res.status_code == 200
    assert "quota exceeded: used 12 B of 5 B" in res.context["form"].non_field_errors()
    assert not Job.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_kills_racing_deletes_never_answer_500(alice, pkg, datacenter):
    rounds = 10
    Quota.objects.create(datacenter=datacenter, user=alice, cpu_millicores=100_000, max_running_jobs=rounds)
    for i in range(rounds):
        services.submit_job(alice, {"name": f"race-{i}", "package": pkg, "entry": "python train.py",
                                    "pservers": 1})
    token = issue_token(alice)
    with LiveASGI() as live, ThreadPoolExecutor(2 * rounds) as pool:
        start = threading.Barrier(2 * rounds)

        def call(method, url):
            with httpx.Client(base_url=live.url, timeout=60,
                              headers={"Authorization": f"Token {token}"}) as http:
                start.wait()
                return method, http.request(method, url).status_code

        calls = [pool.submit(call, "POST", f"/api/v2/jobs/race-{i}/kill/") for i in range(rounds)]
        calls += [pool.submit(call, "DELETE", f"/api/v2/jobs/race-{i}/") for i in range(rounds)]
        answers = [c.result() for c in calls]

    kills = [code for method, code in answers if method == "POST"]
    assert set(kills) <= {200, 400, 404}, answers
    assert {code for method, code in answers if method == "DELETE"} <= {204, 404}, answers
    assert Job.objects.filter(deleting=False).count() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path", ["/ws/jobs/..%2fx/", "/ws/elsewhere/", "/ws/jobs/a/b/", "/ws/jobs/a%00b/"])
def test_unroutable_websocket_paths_are_refused_not_crashed(alice, path):
    token = issue_token(alice)
    with LiveASGI() as live, pytest.raises(InvalidStatus) as refused:
        connect(f"ws://127.0.0.1:{live.port}{path}", additional_headers={"Authorization": f"Token {token}"},
                open_timeout=20)
    assert refused.value.response.status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize("method,url", [
    ("get", "/api/v2/jobs/a%00b/"), ("post", "/api/v2/jobs/a%00b/kill/"), ("get", "/api/v2/jobs/a%00b/logs/"),
    ("delete", "/api/v2/jobs/a%00b/"), ("get", "/api/v2/jobs/a.b/"), ("get", "/api/v2/no-such-thing/"),
    ("get", "/api/v2/registries/a%0A.b/"),
    ("get", "/api/v2/jobs/?datacenter__name=a%00b"), ("get", "/api/v2/quota/?datacenter=a%00b"),
    ("get", "/api/v2/storage/usage/?datacenter=a%00b"),
])
def test_odd_job_urls_get_a_json_answer_not_a_500(alice_api, method, url):
    res = getattr(alice_api, method)(url)
    assert res.status_code in (400, 404), res.content[:300]
    assert res["Content-Type"] == "application/json"


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/jobs/a%00b/", "/jobs/fit/logs/a%00b/", "/jobs/a%00b/metrics/"])
def test_odd_job_page_urls_are_not_found(client, alice, pkg, url):
    services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1})
    client.force_login(alice)
    assert client.get(url).status_code == 404


@pytest.mark.django_db
@pytest.mark.parametrize("query,field", [
    ("offset=-5", "offset"), ("offset=abc", "offset"), ("offset=" + str(10**30), "offset"),
    ("limit=0", "limit"), ("limit=abc", "limit"), ("limit=1001", "limit"), ("active=maybe", "active"),
])
def test_bad_list_paging_and_filters_are_refused_not_ignored(alice_api, query, field):
    res = alice_api.get(f"/api/v2/jobs/?{query}")
    assert res.status_code == 400 and field in res.json(), res.content


@pytest.mark.django_db
def test_options_requests_are_not_allowed(alice_api):
    assert alice_api.options("/api/v2/files/content/?path=/pfs/local/home/alice/x").status_code == 405
    assert alice_api.options("/api/v2/jobs/").status_code == 405
