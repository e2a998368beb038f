"""The job list (API and page) walks a cursor, newest first: no COUNT, the same queries at any
depth, and jobs submitted during a walk neither repeat nor hide rows."""

import base64
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from jobs.models import Job

pytestmark = pytest.mark.django_db


def make_jobs(user, datacenter, names, state="Queued"):
    return Job.objects.bulk_create(
        Job(user=user, datacenter=datacenter, name=name, state=state, mode="ps", pservers=1, trainers=1,
            package=f"/pfs/local/home/{user.username}/pkg", entry="python train.py", k8s_name=name)
        for name in names)


def walk(api, url):
    """Every page from `url` following `next`; the pages' names, in order."""
    pages = []
    while url:
        body = api.get(url).json()
        assert "count" not in body  # no COUNT over a user's whole history
        pages.append([j["name"] for j in body["results"]])
        url = body["next"]
    return pages


def newest_first(user):
    return list(Job.objects.filter(user=user).order_by("-created", "-id").values_list("name", flat=True))


def test_walking_next_lists_every_job_once_newest_first(alice, alice_api, datacenter):
    make_jobs(alice, datacenter, [f"job-{i}" for i in range(23)])
    pages = walk(alice_api, "/api/v2/jobs/?limit=5")
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    assert sum(pages, []) == newest_first(alice)


def test_jobs_sharing_one_submit_time_are_neither_repeated_nor_skipped(alice, alice_api, datacenter):
    make_jobs(alice, datacenter, [f"job-{i}" for i in range(20)])
    same = timezone.now() - timedelta(hours=1)
    Job.objects.filter(name__in=[f"job-{i}" for i in range(3, 15)]).update(created=same)
    names = sum(walk(alice_api, "/api/v2/jobs/?limit=4"), [])
    assert names == newest_first(alice) and len(set(names)) == 20


def test_jobs_submitted_during_a_walk_do_not_shift_it(alice, alice_api, datacenter):
    make_jobs(alice, datacenter, [f"old-{i}" for i in range(12)])
    before = newest_first(alice)
    seen, url, n = [], "/api/v2/jobs/?limit=5", 0
    while url:
        body = alice_api.get(url).json()
        seen += [j["name"] for j in body["results"]]
        make_jobs(alice, datacenter, [f"new-{n}", f"new-{n + 1}"])  # lands before the cursor
        n += 2
        url = body["next"]
    assert seen == before


def test_previous_walks_back_to_the_first_page(alice, alice_api, datacenter):
    make_jobs(alice, datacenter, [f"job-{i}" for i in range(12)])
    first = alice_api.get("/api/v2/jobs/?limit=5").json()
    assert first["previous"] is None
    second = alice_api.get(first["next"]).json()
    back = alice_api.get(second["previous"]).json()
    assert [j["name"] for j in back["results"]] == [j["name"] for j in first["results"]]


def test_a_deep_page_takes_the_same_queries_as_the_first(alice, alice_api, datacenter):
    make_jobs(alice, datacenter, [f"job-{i}" for i in range(60)])
    with CaptureQueriesContext(connection) as first:
        body = alice_api.get("/api/v2/jobs/?limit=10").json()
    for _ in range(4):
        body = alice_api.get(body["next"]).json()
    with CaptureQueriesContext(connection) as deep:
        alice_api.get(body["next"])
    assert len(deep) == len(first)
    assert not any("COUNT(" in q["sql"].upper() for q in first.captured_queries + deep.captured_queries)


def test_filters_hold_on_every_page(alice, alice_api, datacenter):
    make_jobs(alice, datacenter, [f"done-{i}" for i in range(7)], state="Succeeded")
    make_jobs(alice, datacenter, [f"run-{i}" for i in range(6)], state="Running")
    pages = walk(alice_api, "/api/v2/jobs/?active=false&limit=3")
    assert sorted(sum(pages, [])) == sorted(f"done-{i}" for i in range(7)) and len(pages) == 3
    pages = walk(alice_api, "/api/v2/jobs/?state=Running&limit=4")
    assert sorted(sum(pages, [])) == sorted(f"run-{i}" for i in range(6))


def test_another_users_jobs_never_appear_on_any_page(alice, bob, alice_api, datacenter):
    make_jobs(alice, datacenter, [f"a-{i}" for i in range(5)])
    make_jobs(bob, datacenter, [f"b-{i}" for i in range(5)])
    assert sorted(sum(walk(alice_api, "/api/v2/jobs/?limit=2"), [])) == [f"a-{i}" for i in range(5)]


def cursor(raw: str) -> str:
    return base64.b64encode(raw.encode()).decode()


@pytest.mark.parametrize("query,field", [
    ("cursor=%25%25%25", "cursor"), (f"cursor={cursor('p=yesterday')}", "cursor"),
    (f"cursor={cursor('p=2026-13-45 10:00:00')}", "cursor"), (f"cursor={cursor('o=-4')}", "cursor"),
    (f"cursor={cursor('p=2026-01-01%00')}", "cursor"), ("offset=10", "offset"),
    ("limit=0", "limit"), ("limit=1001", "limit"), ("limit=x", "limit"),
])
def test_unreadable_cursors_and_offsets_are_refused_by_name(alice_api, query, field):
    res = alice_api.get(f"/api/v2/jobs/?{query}")
    assert res.status_code == 400 and field in res.json(), res.content


def page_names(html: str) -> list[str]:
    return re.findall(r'<td><a href="/jobs/([^/"]+)/">', html)


def links(html: str) -> dict[str, str]:
    found = re.findall(r'<a href="([^"]*)">(← newer|older →)</a>', html)
    return {label: href.replace("&amp;", "&") for href, label in found}


def test_the_page_walks_older_and_newer_with_its_filters(client, alice, datacenter):
    make_jobs(alice, datacenter, [f"done-{i}" for i in range(30)], state="Succeeded")
    make_jobs(alice, datacenter, ["running"], state="Running")
    client.force_login(alice)
    first = client.get("/jobs/?active=false").content.decode()
    assert len(page_names(first)) == 25 and "← newer" not in links(first)
    older = links(first)["older →"]
    assert "active=false" in older and "cursor=" in older
    second = client.get("/jobs/" + older).content.decode()
    assert sorted(page_names(first) + page_names(second)) == sorted(f"done-{i}" for i in range(30))
    assert "older →" not in links(second)
    back = client.get("/jobs/" + links(second)["← newer"]).content.decode()
    assert page_names(back) == page_names(first)


def test_the_page_shows_the_first_page_for_a_cursor_it_cannot_read(client, alice, datacenter):
    make_jobs(alice, datacenter, ["one", "two"])
    client.force_login(alice)
    res = client.get(f"/jobs/?cursor={cursor('p=garbage')}&offset=3")
    assert res.status_code == 200 and sorted(page_names(res.content.decode())) == ["one", "two"]


@pytest.mark.parametrize("sort,key,reverse", [("oldest", None, False), ("name", "name", False),
                                              ("-name", "name", True)])
def test_walking_a_sorted_list_lists_every_job_once_in_that_order(alice, alice_api, datacenter, sort, key, reverse):
    # Created out of name order; names that sort alike in every collation (PostgreSQL's may ignore case).
    make_jobs(alice, datacenter, [f"job-{i * 7 % 17:02}" for i in range(17)])
    names = sum(walk(alice_api, f"/api/v2/jobs/?limit=4&sort={sort}"), [])
    expected = newest_first(alice)[::-1] if key is None else sorted(newest_first(alice), reverse=reverse)
    assert names == expected


def test_an_unknown_sort_is_refused_by_name_and_a_page_sorts_by_name(client, alice, alice_api, datacenter):
    assert "sort" in alice_api.get("/api/v2/jobs/?sort=state").json()
    make_jobs(alice, datacenter, [f"done-{i:02}" for i in range(30)], state="Succeeded")
    client.force_login(alice)
    first = client.get("/jobs/?sort=name").content.decode()
    assert page_names(first) == [f"done-{i:02}" for i in range(25)]
    second = client.get("/jobs/" + links(first)["older →"]).content.decode()
    assert page_names(second) == [f"done-{i:02}" for i in range(25, 30)]
    assert '<option value="name" selected>' in first
    # A name with a NUL in a cursor's position is the client's error, not a 500.
    assert alice_api.get(f"/api/v2/jobs/?sort=name&cursor={cursor('p=a%00b')}").status_code == 400
