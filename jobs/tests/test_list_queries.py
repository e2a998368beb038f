"""What a job list or detail request costs the database, pinned by counts rather than clocks
(bench/job_list.py and bench/web.py time them): the same few queries whatever the number of jobs,
replicas and events; no DISTINCT (nothing the filters join can repeat a row); and on PostgreSQL,
a plan for every filter and sort that reads an index in the page's order instead of sorting the
user's whole history."""

import re

import pytest
from django.db import connection
from django.db.models.sql.compiler import SQLCompiler
from django.http import QueryDict
from django.test.utils import CaptureQueriesContext

from accounts.models import Registry
from jobs.filtersets import JobFilterSet
from jobs.models import Job, JobEvent, Replica
from tests.support import make_job

pytestmark = pytest.mark.django_db

FILTERS = ["", "state=Running", "state=Queued&state=Running", "state=Succeeded", "active=true", "active=false",
           "name=ResNet", "name=o", "datacenter__name=local", "sort=name", "sort=-name", "sort=oldest", "mode=ps",
           "state=Running&sort=name"]


@pytest.fixture
def alice_api(alice_api):
    """alice's token client, its token's use already recorded (written at most once a minute, by
    the first request: accounts/auth.py), so that the requests counted are the steady ones."""
    assert alice_api.get("/api/v2/version/").status_code == 200
    return alice_api


def make_jobs(user, datacenter, count: int) -> None:
    Job.objects.bulk_create(
        Job(user=user, datacenter=datacenter, name=f"job-{i}", k8s_name=f"job-{i}", mode="ps", pservers=1,
            trainers=1, package="/pfs/local/home/alice/pkg", entry="python train.py",
            state="Running" if i % 20 == 0 else "Queued" if i % 20 == 1 else "Succeeded")
        for i in range(count))


def with_replicas_and_events(job: Job, replicas: int, events: int) -> Job:
    for k in range(replicas):
        r = Replica.objects.create(job=job, role="trainer", index=k, state="Running")
        JobEvent.objects.create(job=job, replica=r, state="Running", reason="Started", message="")
    for k in range(events):
        JobEvent.objects.create(job=job, state="Running", reason=f"R{k}", message="")
    return job


def queries(client, url: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        res = client.get(url)
    assert res.status_code == 200, (url, res.status_code)
    return [q["sql"] for q in captured.captured_queries]


@pytest.mark.parametrize("query", FILTERS)
def test_a_list_request_takes_two_queries_without_distinct_at_any_size(alice, alice_api, datacenter, query):
    make_jobs(alice, datacenter, 5)
    few = queries(alice_api, f"/api/v2/jobs/?{query}")
    make_jobs_more = [f"more-{i}" for i in range(60)]
    Job.objects.bulk_create(Job(user=alice, datacenter=datacenter, name=n, k8s_name=n, mode="ps", pservers=1,
                                trainers=1, package="/p", entry="x", state="Running") for n in make_jobs_more)
    registry = Registry.objects.create(user=alice, name="reg", server="r.example.com", username="u", password="p")
    Job.objects.filter(user=alice, name__startswith="more-").update(cloned_from=Job.objects.get(name="job-0"),
                                                                     registry=registry)
    many = queries(alice_api, f"/api/v2/jobs/?{query}")
    # the token, the page (the datacenter filter looks its id up first; on PostgreSQL a name that
    # matches some jobs reads their page's ids first, then those rows: core.pagination.SortedIfFew)
    looks_up = "datacenter" in query or (query == "name=o" and connection.vendor == "postgresql")
    assert len(many) == len(few) == (3 if looks_up else 2), many
    assert not any("DISTINCT" in sql.upper() for sql in many), many


def test_a_job_detail_takes_four_queries_whatever_its_replicas_and_events(alice, alice_api, datacenter):
    small = with_replicas_and_events(make_job(alice, datacenter, name="small"), replicas=1, events=1)
    big = with_replicas_and_events(make_job(alice, datacenter, name="big"), replicas=8, events=40)
    Job.objects.filter(pk=big.pk).update(cloned_from=small)  # its source's name is read with it
    # the token, the job (with its datacenter, registry and source), its replicas (with their latest
    # usage), its events (with their replicas)
    assert len(queries(alice_api, f"/api/v2/jobs/{small.name}/")) == 4
    assert len(queries(alice_api, f"/api/v2/jobs/{big.name}/")) == 4
    assert alice_api.get(f"/api/v2/jobs/{big.name}/").json()["cloned_from"] == "small"


def test_the_job_list_page_takes_the_same_queries_at_any_size_without_distinct(alice, datacenter, client):
    client.force_login(alice)
    make_jobs(alice, datacenter, 3)
    few = queries(client, "/jobs/?state=Running&state=Queued")
    make_jobs(alice.__class__.objects.create_user("carol"), datacenter, 40)  # another user's jobs too
    Job.objects.bulk_create(Job(user=alice, datacenter=datacenter, name=f"x-{i}", k8s_name=f"x-{i}", mode="ps",
                                pservers=1, trainers=1, package="/p", entry="x", state="Running") for i in range(40))
    many = queries(client, "/jobs/?state=Running&state=Queued")
    assert len(many) == len(few)
    assert not any("DISTINCT" in sql.upper() for sql in many), many


# On PostgreSQL: the plan of each filter's page. On a test-sized table the planner rightly reads
# the few rows any way and sorts them, so sequential scans, bitmap scans and sorts are priced out
# (PostgreSQL still uses them where nothing else can answer): the plan then shows whether an
# index serves the filter in the page's order, as it must for 100,000 jobs: no Sort node. The name
# filter is the exception: its trigram index finds the few matching rows, which are then sorted
# (see the tests after this one). Filters that keep most jobs (state=Succeeded: 90% of them here)
# may rightly read the newest-first index and skip the few others.
NEWEST = "job_user_newest_first"
EXPECTED_INDEX = {
    "": (NEWEST,), "sort=oldest": (NEWEST,), "active=false": (NEWEST,),
    "state=Running": ("job_user_state_newest_first",), "state=Succeeded": ("job_user_state_newest_first", NEWEST),
    "active=true": ("job_user_active_newest_first",), "state=Queued&state=Running": ("job_user_active_newest_first",),
    "datacenter__name=dc2": ("job_user_dc_newest_first",), "sort=name": ("job_unique_name_per_user",),
    "sort=-name": ("job_unique_name_per_user",), "name=ResNet": ("job_name_upper_trgm",),
}



def test_a_job_detail_compiles_no_sql_after_the_first(alice, alice_api, datacenter, monkeypatch):
    # Its queries are prepared once per process (core/prepared.py), the token's too (accounts/auth.py).
    job = with_replicas_and_events(make_job(alice, datacenter, name="small"), replicas=2, events=2)
    first = alice_api.get(f"/api/v2/jobs/{job.name}/")
    compiled = []
    original = SQLCompiler.as_sql
    monkeypatch.setattr(SQLCompiler, "as_sql", lambda self, *a, **k: compiled.append(self.query.model) or original(
        self, *a, **k))
    again = alice_api.get(f"/api/v2/jobs/{job.name}/")
    assert again.status_code == 200 and again.json() == first.json()
    assert alice_api.get("/api/v2/jobs/missing/").status_code == 404
    assert compiled == []
    # with query parameters the filterset applies to the lookup, as before: compiled as a queryset
    assert alice_api.get(f"/api/v2/jobs/{job.name}/?state=Succeeded").status_code == 404
    assert compiled


def test_a_plain_job_list_compiles_no_sql_after_the_first(alice, alice_api, datacenter, monkeypatch):
    # Its first page is a prepared query (core.pagination.FirstPage); other pages, sizes, orders and
    # filters compile theirs as before.
    make_jobs(alice, datacenter, 55)
    first = alice_api.get("/api/v2/jobs/").json()
    compiled = []
    original = SQLCompiler.as_sql
    monkeypatch.setattr(SQLCompiler, "as_sql", lambda self, *a, **k: compiled.append(self.query.model) or original(
        self, *a, **k))
    assert alice_api.get("/api/v2/jobs/").json() == first
    assert compiled == []
    assert [j["name"] for j in first["results"]] == [f"job-{i}" for i in range(54, 4, -1)]
    rest = alice_api.get(first["next"]).json()
    assert [j["name"] for j in rest["results"]] == [f"job-{i}" for i in range(4, -1, -1)] and compiled
    for query, names in [("limit=3", ["job-54", "job-53", "job-52"]), ("sort=oldest&limit=2", ["job-0", "job-1"]),
                         ("state=Running&limit=2", ["job-40", "job-20"])]:
        assert [j["name"] for j in alice_api.get(f"/api/v2/jobs/?{query}").json()["results"]] == names, query


@pytest.mark.parametrize("query", EXPECTED_INDEX)
def test_on_postgresql_each_filter_reads_its_index_in_page_order(alice, bob, alice_api, datacenter, query):
    if connection.vendor != "postgresql":
        pytest.skip("query plans are PostgreSQL's")
    make_jobs(alice, datacenter, 400)
    make_jobs(bob, datacenter, 50)
    dc2 = datacenter.__class__.objects.create(name="dc2", backend="local")
    Job.objects.filter(user=alice, name__in=[f"job-{i}" for i in range(0, 400, 40)]).update(datacenter=dc2)
    Job.objects.filter(user=alice, name="job-7").update(name="resnet-50")
    page = [sql for sql in queries(alice_api, f"/api/v2/jobs/?{query}") if "LIMIT 51" in sql]
    assert len(page) == 1
    with connection.cursor() as cur:
        cur.execute("ANALYZE jobs_job")
        cur.execute("SET LOCAL enable_seqscan = off")
        if query.startswith("name="):
            # Whether the trigram index matches the filter's expression: on a test-sized table the
            # user's own rows are fewer than its posting lists, so it is asked on the filter alone.
            plan = JobFilterSet({"name": "ResNet"}, queryset=Job.objects.all()).qs.only("id").explain()
        else:
            cur.execute("SET LOCAL enable_bitmapscan = off")
            cur.execute("SET LOCAL enable_sort = off")
            cur.execute("EXPLAIN " + page[0])
            plan = "\n".join(row[0] for row in cur.fetchall())
    assert any(f" {index} " in plan for index in EXPECTED_INDEX[query]), plan
    if not query.startswith("name="):
        # an Incremental Sort only orders the ties of a key the index already sorts (the name's)
        assert not re.search(r"(^|->  )Sort ", plan, re.MULTILINE), plan


def sweep_and_others(alice, datacenter) -> None:
    """alice's oldest 400 jobs are a sweep (`sweep-N`), her newest 4,000 are not: a name rare in her
    history and clustered in its past, as a finished sweep's runs are."""
    Job.objects.bulk_create(Job(user=alice, datacenter=datacenter, name=f"sweep-{i}", k8s_name=f"sweep-{i}",
                                mode="ps", pservers=1, trainers=1, package="/p", entry="x", state="Succeeded")
                            for i in range(400))
    make_jobs(alice, datacenter, 4000)
    with connection.cursor() as cur:
        cur.execute("ANALYZE jobs_job")


def page_queries(alice_api, url: str) -> list[str]:
    """The queries of a list request that read jobs (not its token)."""
    return [sql for sql in queries(alice_api, url) if '"jobs_job"' in sql]


def plan(sql: str) -> str:
    with connection.cursor() as cur:
        cur.execute("EXPLAIN " + sql)
        return "\n".join(row[0] for row in cur.fetchall())


def names(alice_api, url: str) -> list[str]:
    found = []
    while url:
        page = alice_api.get(url).json()
        found += [job["name"] for job in page["results"]]
        url = page["next"]
    return found


def test_on_postgresql_a_name_clustered_in_the_past_is_sorted_not_walked_to(alice, alice_api, datacenter):
    if connection.vendor != "postgresql":
        pytest.skip("query plans are PostgreSQL's")
    sweep_and_others(alice, datacenter)
    # Walking newest first, PostgreSQL would expect a page of `sweep` within its first 600 jobs
    # (400 in 4,400 match) and read all 4,000 others instead. The page's ids come first, the 400
    # found by the index counted and sorted; then those 50 rows, whole (core.pagination.SortedIfFew).
    ids, rows = page_queries(alice_api, "/api/v2/jobs/?name=SWEEP")
    assert "COUNT(*) OVER ()" in ids and '"jobs_job"."id" IN (' in rows and "LIKE" in rows
    found = plan(ids)
    assert re.search(r"Sort Key: .*created DESC", found), found
    assert " job_name_upper_trgm " in found or "Seq Scan" in found, found
    assert " job_user_newest_first " not in found, found
    newest_first = list(Job.objects.filter(user=alice, name__startswith="sweep-").order_by("-created", "-id")
                        .values_list("name", flat=True))
    assert names(alice_api, "/api/v2/jobs/?name=SWEEP") == newest_first


def test_on_postgresql_a_name_most_jobs_match_is_met_walking_newest_first(alice, alice_api, datacenter, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("query plans are PostgreSQL's")
    sweep_and_others(alice, datacenter)
    # `job-` matches 4,000 jobs: more than the few the filter sorts (made 1,000 here)
    monkeypatch.setattr("jobs.filtersets.FEW_NAME_MATCHES", 1000)
    counted, walked = page_queries(alice_api, "/api/v2/jobs/?name=job-")
    assert "COUNT(*) OVER ()" in counted and "COUNT(*) OVER ()" not in walked
    found = plan(walked)
    assert " job_user_newest_first " in found and "Sort Key" not in found, found
    assert names(alice_api, "/api/v2/jobs/?name=job-")[:3] == ["job-3999", "job-3998", "job-3997"]


def test_on_postgresql_new_names_go_straight_into_the_name_index(alice, datacenter):
    # Without fastupdate=off, GIN keeps new entries in a pending list that every search reads
    # through until VACUUM merges it (jobs/migrations/0011).
    if connection.vendor != "postgresql":
        pytest.skip("a PostgreSQL index option")
    make_jobs(alice, datacenter, 3)
    with connection.cursor() as cur:
        cur.execute("SELECT reloptions FROM pg_class WHERE relname = 'job_name_upper_trgm'")
        assert cur.fetchone()[0] == ["fastupdate=off"]


def test_without_query_parameters_the_job_filters_change_nothing(alice, datacenter):
    # The job views skip the filterset for a request without query parameters (jobs/api/views.py):
    # right only while it filters nothing then.
    make_jobs(alice, datacenter, 3)
    everything = Job.objects.filter(user=alice).order_by("-created", "-id")
    filtered = JobFilterSet(QueryDict(), queryset=everything)
    assert filtered.is_valid()
    assert str(filtered.qs.query) == str(everything.query)
