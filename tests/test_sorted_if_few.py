"""core.pagination.SortedIfFew: the page the cursor pagination reads through it is the queryset's
own page, in every order, from any cursor, whether its matches are few (counted and sorted: two
queries) or many (the queryset's own slice); anything else it answers as the queryset does."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.pagination import SortedIfFew
from jobs.models import Job

pytestmark = pytest.mark.django_db

ORDERINGS = [("-created", "-id"), ("created", "id"), ("name", "id"), ("-name", "-id")]


@pytest.fixture
def jobs(alice, bob, datacenter):
    """alice's 30 jobs, created out of name order, 10 of them at one instant; bob's 5."""
    made = Job.objects.bulk_create(
        Job(user=user, datacenter=datacenter, name=f"{user.username}-{i * 7 % 30:02}", k8s_name=f"k-{i}",
            mode="ps", pservers=1, trainers=1, package="/p", entry="x", state="Running" if i % 3 else "Failed")
        for user, count in ((alice, 30), (bob, 5)) for i in range(count))
    same = timezone.now() - timedelta(hours=1)
    Job.objects.filter(pk__in=[j.pk for j in made[5:15]]).update(created=same)
    return Job.objects.filter(user=alice).select_related("datacenter")


def ids(rows):
    return [row.pk for row in rows]


@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize("cap", [100, 12])  # more than the matches (sorted), fewer (the queryset's slice)
def test_each_slice_is_the_querysets_own(jobs, ordering, cap):
    running = jobs.filter(state="Running")  # 20 of alice's 30
    position = running.order_by(*ordering)[7]
    field = ordering[0].lstrip("-")
    after = {f"{field}__{'lt' if ordering[0].startswith('-') else 'gt'}": getattr(position, field)}
    for start, stop in [(0, 5), (3, 11), (0, 100), (18, 25), (40, 45)]:
        for refine in ({}, after):
            expected = ids(running.order_by(*ordering).filter(**refine)[start:stop])
            got = SortedIfFew(running, cap).order_by(*ordering).filter(**refine)[start:stop]
            assert ids(got) == expected, (start, stop, refine)
            with CaptureQueriesContext(connection) as captured:  # the rows as the queryset reads them
                assert all(type(row) is Job and row.datacenter.name for row in got)
            assert len(captured) == 0


def test_few_matches_take_two_queries_and_many_the_querysets_one_after_the_count(jobs):
    for cap, second in [(100, "IN ("), (12, "LIMIT 5")]:
        with CaptureQueriesContext(connection) as captured:
            got = SortedIfFew(jobs, cap).order_by("-created", "-id")[0:5]
        assert len(got) == 5 and len(captured) == 2
        assert "COUNT(*) OVER ()" in captured[0]["sql"] and second in captured[1]["sql"]
    with CaptureQueriesContext(connection) as captured:  # nothing matches: the count says so
        assert SortedIfFew(jobs.filter(name="nobody"), 100).order_by("-created", "-id")[0:5] == []
    assert len(captured) == 1
    with CaptureQueriesContext(connection) as captured:  # a filter that matches nothing asks nothing
        assert SortedIfFew(jobs.none(), 100).order_by("-created", "-id")[0:5] == []
    assert len(captured) == 0


def test_other_uses_are_the_querysets(jobs):
    few = SortedIfFew(jobs, 100)
    assert few.count() == len(few) == 30 and sorted(ids(few)) == sorted(ids(jobs))
    assert few.get(name="alice-07").name == "alice-07"
    assert ids(few.order_by("name")[2:4]) == ids(jobs.order_by("name")[2:4])
    assert few.order_by("name")[3].pk == jobs.order_by("name")[3].pk  # an index, not a slice
    assert ids(few[0:3]) == ids(jobs[0:3])  # no order given: nothing to sort by


def test_the_page_api_walks_a_few_matches_as_it_walks_many(alice, alice_api, datacenter, monkeypatch):
    Job.objects.bulk_create(Job(user=alice, datacenter=datacenter, name=f"sweep-{i * 7 % 23:02}",
                                k8s_name=f"sweep-{i}", mode="ps", pservers=1, trainers=1, package="/p", entry="x",
                                state="Succeeded") for i in range(23))
    pages = {}
    for cap in (1000, 5):  # sorted for the page, or walked to (on PostgreSQL; SQLite always walks)
        monkeypatch.setattr("jobs.filtersets.FEW_NAME_MATCHES", cap)
        for sort in ("newest", "name", "-name", "oldest"):
            url, walked, back = f"/api/v2/jobs/?name=SWEEP&sort={sort}&limit=4", [], None
            while url:
                body = alice_api.get(url).json()
                walked.append([j["name"] for j in body["results"]])
                url, back = body["next"], body["previous"] or back
            first_again = alice_api.get(back).json()  # the way back from the last page
            pages[cap, sort] = (walked, [j["name"] for j in first_again["results"]])
    for sort in ("newest", "name", "-name", "oldest"):
        assert pages[1000, sort] == pages[5, sort]
        assert sorted(sum(pages[1000, sort][0], [])) == sorted(f"sweep-{i:02}" for i in range(23))
        assert pages[1000, sort][1] == pages[1000, sort][0][-2]
    assert sum(pages[1000, "name"][0], []) == [f"sweep-{i:02}" for i in range(23)]
