"""Job admission under concurrency: twenty submissions at once, over real HTTP (uvicorn, as
`make run` serves), and admission passes racing each other, never admit more than the user's
quota; the rest wait in the queue, or are refused when they ask to fail fast. Run on SQLite by
default and on PostgreSQL with DATABASE_URL set."""

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from accounts.services import issue_token
from jobs.models import ACTIVE_STATES, ADMITTED_STATES, Job
from jobs.tasks import admit_queue
from quotas.models import Quota
from tests.support import LiveASGI, make_package

pytestmark = pytest.mark.django_db(transaction=True)

PARALLEL = 20


def submit_all(requests, path="/api/v2/jobs/"):
    """POST every (token, body) at once, each from a thread of its own; the answers in order."""
    with LiveASGI() as live, ThreadPoolExecutor(PARALLEL) as pool:
        def post(request):
            token, body = request
            with httpx.Client(base_url=live.url, timeout=60) as http:
                return http.post(path, json=body, headers={"Authorization": f"Token {token}"})

        return list(pool.map(post, requests))


def bodies(pkg, n, **fields):
    return [{"name": f"job-{i}", "package": pkg, "entry": "python train.py", "mode": "collective",
             "trainers": 1, "cpu": "1", **fields} for i in range(n)]


def admit_in_parallel(datacenter, n=8):
    """n admission passes at once, each in a thread (and a database connection) of its own."""
    from django.db import connection

    def one(_):
        try:
            admit_queue.run(datacenter.pk)
        finally:
            connection.close()

    with ThreadPoolExecutor(n) as pool:
        list(pool.map(one, range(n)))


def test_parallel_submissions_queue_and_parallel_passes_admit_exactly_max_running_jobs(alice, datacenter):
    Quota.objects.create(datacenter=datacenter, user=alice, max_running_jobs=2)
    pkg = make_package(alice, "fit", {"train.py": ""})

    token = issue_token(alice)
    answers = submit_all([(token, body) for body in bodies(pkg, PARALLEL)])
    assert [r.status_code for r in answers] == [201] * PARALLEL, [r.text for r in answers if r.status_code != 201]
    assert {r.json()["state"] for r in answers} == {"Queued"}

    admit_in_parallel(datacenter)

    assert Job.objects.filter(user=alice, state__in=ADMITTED_STATES).count() == 2
    waiting = Job.objects.filter(user=alice, state="Queued").order_by("queue_position")
    assert [j.queue_position for j in waiting] == list(range(1, PARALLEL - 1))
    assert {j.message for j in waiting} == {"2 of 2 running jobs used (quota)"}


def test_parallel_fail_fast_submissions_admit_exactly_max_running_jobs_and_refuse_the_rest(alice, datacenter):
    Quota.objects.create(datacenter=datacenter, user=alice, max_running_jobs=2)
    pkg = make_package(alice, "fit", {"train.py": ""})

    token = issue_token(alice)
    answers = submit_all([(token, body) for body in bodies(pkg, PARALLEL, fail_fast=True)])

    codes = sorted(r.status_code for r in answers)
    assert codes == [201] * 2 + [400] * (PARALLEL - 2), [r.text for r in answers if r.status_code != 400]
    refused = [r.json() for r in answers if r.status_code == 400]
    assert all("2 of 2 running jobs used (quota)" in body["non_field_errors"][0] for body in refused), refused
    assert Job.objects.filter(user=alice, state__in=ACTIVE_STATES).count() == 2


def test_parallel_fail_fast_submissions_never_exceed_the_cpu_quota(alice, datacenter):
    Quota.objects.create(datacenter=datacenter, user=alice, cpu_millicores=2000, max_running_jobs=100)
    pkg = make_package(alice, "fit", {"train.py": ""})

    token = issue_token(alice)
    answers = submit_all([(token, body) for body in bodies(pkg, PARALLEL, cpu="1", fail_fast=True)])

    assert sorted(r.status_code for r in answers) == [201] * 2 + [400] * (PARALLEL - 2)
    assert all("of 2 used (quota)" in r.json()["cpu"][0] for r in answers if r.status_code == 400)
    assert Job.objects.filter(user=alice, state__in=ACTIVE_STATES).count() == 2


def test_parallel_fail_fast_submissions_never_exceed_the_datacenters_capacity(alice, bob, datacenter):
    type(datacenter).objects.filter(pk=datacenter.pk).update(capacity_cpu_millicores=3000)
    pkg_a, pkg_b = make_package(alice, "fit", {"train.py": ""}), make_package(bob, "fit", {"train.py": ""})
    token_a, token_b = issue_token(alice), issue_token(bob)

    answers = submit_all([(token_a, b) for b in bodies(pkg_a, PARALLEL // 2, fail_fast=True)]
                         + [(token_b, b) for b in bodies(pkg_b, PARALLEL // 2, fail_fast=True)])

    assert sum(r.status_code == 201 for r in answers) == 3
    assert all("free in datacenter local" in r.json()["cpu"][0] for r in answers if r.status_code == 400)
    assert Job.objects.filter(state__in=ADMITTED_STATES).count() == 3


def test_parallel_submissions_never_queue_more_than_max_queued_jobs(alice, bob, datacenter):
    Quota.objects.create(datacenter=datacenter, user=alice, max_queued_jobs=3)
    pkg_a, pkg_b = make_package(alice, "fit", {"train.py": ""}), make_package(bob, "fit", {"train.py": ""})
    token_a, token_b = issue_token(alice), issue_token(bob)

    answers = submit_all([(token_a, b) for b in bodies(pkg_a, PARALLEL // 2)]
                         + [(token_b, b) for b in bodies(pkg_b, PARALLEL // 2)])

    alices = [r for r in answers[:PARALLEL // 2] if r.status_code != 201]
    assert len(alices) == PARALLEL // 2 - 3 and {r.status_code for r in alices} == {400}
    assert all(r.json()["non_field_errors"] == ["3 of 3 queued jobs used (quota): wait until some start, or kill "
                                                "some"] for r in alices), alices[0].text
    assert Job.objects.filter(user=alice).count() == 3
    assert Job.objects.filter(user=bob).count() == PARALLEL // 2  # bob's own quota: the default 1000


def test_one_users_admissions_do_not_use_another_users_quota(alice, bob, datacenter):
    Quota.objects.create(datacenter=datacenter, user=alice, max_running_jobs=1)
    Quota.objects.create(datacenter=datacenter, user=bob, max_running_jobs=1)
    pkg_a = make_package(alice, "fit", {"train.py": ""})
    pkg_b = make_package(bob, "fit", {"train.py": ""})
    token_a, token_b = issue_token(alice), issue_token(bob)

    answers = submit_all([(token_a, b) for b in bodies(pkg_a, PARALLEL // 2, fail_fast=True)]
                         + [(token_b, b) for b in bodies(pkg_b, PARALLEL // 2, fail_fast=True)])

    assert sum(r.status_code == 201 for r in answers) == 2
    assert Job.objects.filter(user=alice).count() == 1 and Job.objects.filter(user=bob).count() == 1


def test_admission_refuses_to_run_on_sqlite_without_immediate_transactions(alice, datacenter, monkeypatch):
    from django.core.exceptions import ImproperlyConfigured
    from django.db import connection, transaction

    from quotas.services import lock_admissions

    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL locks the user's row")
    # A deferred transaction reads, then fails to upgrade its lock when a racing one wrote first.
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "transaction_mode", "DEFERRED")
    with pytest.raises(ImproperlyConfigured), transaction.atomic():
        lock_admissions(alice)
