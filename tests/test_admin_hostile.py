"""The operators' console and the staff-only pages, as hostile users use them: a user reaching a
staff surface, a staff member who is not a superuser granting themselves more, forms that skip the
services' checks, input that makes a 500, markup in names, and queries per changelist row."""

import json

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import connection
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts import services as accounts_services
from accounts.models import Datacenter, Registry
from jobs import services
from jobs.models import Job, JobEvent
from notifications.models import Delivery, EmailPreference, Webhook
from quotas.models import Quota
from tests.support import make_package

pytestmark = pytest.mark.django_db


def submit(user, name="fit"):
    pkg = make_package(user, name, {"train.py": ""})
    return services.submit_job(user, {"name": name, "package": pkg, "entry": "python train.py", "pservers": 1})


@pytest.fixture
def job(alice):
    return submit(alice)


@pytest.fixture
def op(client, staff):
    """A staff member who is not a superuser, given every permission there is."""
    staff.user_permissions.set(Permission.objects.all())
    client.force_login(staff)
    return client


@pytest.fixture
def root(db):
    return User.objects.create_superuser("root", "root@example.com", "password")


def user_form(user, **changes):
    data = {"username": user.username, "first_name": "", "last_name": "", "email": user.email,
            "is_active": "on", "date_joined_0": "2024-01-01", "date_joined_1": "00:00:00",
            "initial-date_joined_0": "2024-01-01", "initial-date_joined_1": "00:00:00"}
    if user.is_staff:
        data["is_staff"] = "on"
    return {**data, **changes}


# --- a user reaching a staff surface -------------------------------------------------------------

def test_a_user_reaches_no_admin_page_and_no_staff_action(client, alice, bob):
    bobs = submit(bob, "bobs")
    client.force_login(alice)
    for url in ["/admin/", "/admin/jobs/job/", f"/admin/jobs/job/{bobs.pk}/change/", "/admin/auth/user/"]:
        res = client.get(url)
        assert res.status_code == 302 and res["Location"].startswith("/admin/login/")
    client.post("/admin/jobs/job/", {"action": "kill_jobs", "_selected_action": [bobs.pk]})
    client.post(f"/cluster/jobs/{bobs.pk}/kill/")
    client.post("/jobs/-/bulk/", {"action": "kill", "job": [bobs.pk]})
    bobs.refresh_from_db()
    assert bobs.is_active
    for url in ["/jobs/?owner=all", "/cluster/"]:
        assert b"bobs" not in client.get(url, headers={"HX-Request": "true"}).content


# --- a staff member who is not a superuser --------------------------------------------------------

def test_a_staff_member_with_every_permission_cannot_make_themselves_superuser(op, staff):
    everything = [p.pk for p in Permission.objects.all()]
    op.post(f"/admin/auth/user/{staff.pk}/change/", user_form(staff, is_superuser="on", user_permissions=everything))
    staff.refresh_from_db()
    assert not staff.is_superuser


def test_a_staff_member_cannot_set_a_superusers_or_another_staff_members_password(op, root, django_user_model):
    other = django_user_model.objects.create_user("ops2", password="password", is_staff=True)
    for target in (root, other):
        res = op.post(f"/admin/auth/user/{target.pk}/password/",
                      {"password1": "Taken-over-123", "password2": "Taken-over-123", "usable_password": "true"})
        assert res.status_code == 403
        target.refresh_from_db()
        assert not target.check_password("Taken-over-123")
        assert op.post(f"/admin/auth/user/{target.pk}/delete/", {"post": "yes"}).status_code == 403
    assert django_user_model.objects.filter(pk__in=[root.pk, other.pk]).count() == 2


def test_a_staff_member_cannot_give_a_group_permissions(op, staff):
    group = Group.objects.create(name="ops")
    staff.groups.add(group)
    everything = [p.pk for p in Permission.objects.all()]
    res = op.post(f"/admin/auth/group/{group.pk}/change/", {"name": "ops", "permissions": everything})
    assert res.status_code == 403
    assert op.post("/admin/auth/group/add/", {"name": "all", "permissions": everything}).status_code == 403
    assert not group.permissions.exists()


def test_a_superuser_still_grants_privileges(client, root, alice):
    client.force_login(root)
    client.post(f"/admin/auth/user/{alice.pk}/change/", user_form(alice, is_staff="on"))
    alice.refresh_from_db()
    assert alice.is_staff


def test_a_stored_registry_password_goes_to_no_other_server_account_or_user(op, alice, bob):
    reg = Registry.objects.create(user=bob, name="r", server="r.example.com", username="u", password="s3cret")
    url = f"/admin/accounts/registry/{reg.pk}/change/"
    base = {"user": bob.pk, "name": "r", "server": "r.example.com", "username": "u", "password": ""}
    assert "s3cret" not in op.get(url).content.decode()
    for change in ({"server": "evil.example.com"}, {"username": "me"}, {"user": alice.pk}):
        res = op.post(url, {**base, **change})
        assert res.status_code == 200 and "needs the password again" in res.content.decode()
    reg.refresh_from_db()
    assert (reg.user, reg.server, reg.username) == (bob, "r.example.com", "u")
    assert op.post(url, {**base, "server": "new.example.com", "password": "new"}).status_code == 302
    assert op.post(url, {**base, "server": "new.example.com"}).status_code == 302  # unchanged: kept


def test_a_registry_server_is_checked_as_the_api_checks_it(op, bob):
    res = op.post("/admin/accounts/registry/add/", {"user": bob.pk, "name": "r", "server": "has space/x",
                                                    "username": "u", "password": "p"})
    assert res.status_code == 200 and not Registry.objects.exists()


# --- forms and actions that would skip the services -----------------------------------------------

def test_a_jobs_owner_registry_and_resources_are_not_edited_in_the_admin(op, job, bob):
    bobs_registry = Registry.objects.create(user=bob, name="r", server="r.example.com", username="u", password="p")
    form = {k: json.dumps(v) if isinstance(v, (dict, list)) else "" if v is None else v
            for k, v in model_to_dict(job).items()}
    form.update({"user": bob.pk, "registry": bobs_registry.pk, "name": "other", "entry": "python evil.py",
                 "trainers": 64, "cpu": "1000", "memory": "1Ti"})
    form.update({f"{p}-{k}": v for p in ("replicas", "events") for k, v in
                 (("TOTAL_FORMS", 0), ("INITIAL_FORMS", 0), ("MIN_NUM_FORMS", 0), ("MAX_NUM_FORMS", 1000))})
    assert op.post(f"/admin/jobs/job/{job.pk}/change/", form).status_code == 302
    job.refresh_from_db()
    assert (job.user.username, job.registry, job.name, job.trainers, job.entry) == (
        "alice", None, "fit", 1, "python train.py")


def test_the_kill_action_says_which_staff_member_killed_the_job(op, job):
    op.post("/admin/jobs/job/", {"action": "kill_jobs", "_selected_action": [job.pk]})
    assert "killed by staff (staff)" in job.events.get(state="Killed").message


def test_a_user_with_jobs_is_deleted_only_once_their_jobs_are_gone(client, root, alice, job):
    client.force_login(root)
    page = client.get(f"/admin/auth/user/{alice.pk}/delete/").content.decode()
    assert "alice&#x27;s job fit" in page
    client.post(f"/admin/auth/user/{alice.pk}/delete/", {"post": "yes"})
    client.post("/admin/auth/user/", {"action": "delete_selected", "_selected_action": [alice.pk], "post": "yes"})
    assert User.objects.filter(pk=alice.pk).exists() and Job.objects.filter(pk=job.pk).exists()
    job.delete()  # what the deletion task does last
    client.post(f"/admin/auth/user/{alice.pk}/delete/", {"post": "yes"})
    assert not User.objects.filter(pk=alice.pk).exists()


@pytest.mark.parametrize("field,value", [
    ("cpu", "99999999999999999999999"), ("memory", "99999999999999999999999Ei"),
    ("storage", "99999999999999999999Ei"), ("gpus", "99999999999999999999"),
    ("max_running_jobs", "-1"), ("max_priority", "99999999999999999999")])
def test_an_absurd_quota_is_a_form_error_not_a_500(op, datacenter, alice, field, value):
    data = {"datacenter": datacenter.pk, "user": alice.pk, "cpu": "1", "memory": "1Gi", "storage": "1Gi",
            "gpus": 0, "max_running_jobs": 5, "max_queued_jobs": 5, "max_priority": 1, field: value}
    res = op.post("/admin/quotas/quota/add/", data)
    assert res.status_code == 200 and "errorlist" in res.content.decode()
    assert not Quota.objects.filter(user=alice).exists()


@pytest.mark.parametrize("config", ["null", "[1]", '"x"'])
def test_a_datacenter_config_that_is_not_an_object_is_refused(op, datacenter, config):
    res = op.post(f"/admin/accounts/datacenter/{datacenter.pk}/change/", {
        "name": "local", "backend": "local", "description": "", "config": config, "kubeconfig": "",
        "default_max_restarts": 0, "capacity_cpu_millicores": "", "capacity_memory_bytes": "", "capacity_gpus": ""})
    assert res.status_code == 200 and "errorlist" in res.content.decode()
    datacenter.refresh_from_db()
    assert datacenter.config == {}


# --- query strings --------------------------------------------------------------------------------

@pytest.mark.parametrize("url", [
    "/admin/jobs/job/?env__contains=a",  # a 500 on SQLite
    "/admin/jobs/job/?name__regex=(",  # a 500 on both databases
    "/admin/jobs/jobevent/?message__iregex=[",
    "/admin/notifications/webhook/?secret__startswith=a",
    "/admin/accounts/datacenter/?kubeconfig__isnull=False",
    "/admin/accounts/registry/?password__regex=^.{100}",
    "/admin/auth/user/?email__regex=(",
])
def test_a_changelist_filters_only_on_what_it_offers(op, job, url):
    assert op.get(url).status_code == 400


@pytest.mark.parametrize("url", [
    "/admin/jobs/job/?state__exact=Queued&datacenter__id__exact=1&deleting__exact=0&created__year=2024",
    "/admin/jobs/job/?state=nonsense&o=99.-3.abc&q=%00%27%22%5C&p=99999",
    "/admin/jobs/jobevent/?reason__exact=%3Cscript%3E", "/admin/accounts/registry/?server__exact=x",
    "/admin/auth/user/?is_staff__exact=1&groups__id__exact=1", "/admin/jobs/job/99999/change/",
])
def test_offered_filters_odd_values_and_unknown_ids_are_no_500(op, job, url):
    assert op.get(url).status_code in (200, 302)


# --- markup in what users control ------------------------------------------------------------------

def test_the_cluster_pages_kill_confirmation_escapes_names_for_javascript(client, staff, alice, job):
    User.objects.filter(pk=alice.pk).update(username="a');alert(1);('")  # beyond the validator: a synced user
    client.force_login(staff)
    page = client.get("/cluster/").content.decode()
    assert "confirm('Kill a\\u0027)" in page


# --- queries per changelist ------------------------------------------------------------------------

def make_rows(n, datacenter):
    for i in range(n):
        user = User.objects.create_user(f"u{i}-{timezone.now().timestamp()}".replace(".", ""))
        job = submit(user, f"j{i}")
        JobEvent.objects.create(job=job, replica=job.replicas.first(), state="Running", reason="Started")
        Registry.objects.create(user=user, name="r", server="r.example.com", username="u", password="p")
        accounts_services.create_named_token(user, name="laptop")
        Quota.objects.create(datacenter=datacenter, user=user)
        hook = Webhook.objects.create(user=user, url="https://example.com/", secret="s")
        Delivery.objects.create(webhook=hook, event="job.succeeded", payload={})
        EmailPreference.objects.create(user=user)


CHANGELISTS = ["/admin/jobs/job/", "/admin/jobs/jobevent/", "/admin/jobs/replica/", "/admin/accounts/registry/",
               "/admin/accounts/apitoken/", "/admin/quotas/quota/", "/admin/notifications/webhook/",
               "/admin/notifications/delivery/", "/admin/notifications/emailpreference/", "/admin/auth/user/"]


def test_changelists_make_as_many_queries_for_many_rows_as_for_one(client, root, datacenter):
    client.force_login(root)

    def counts():
        found = {}
        for url in CHANGELISTS:
            with CaptureQueriesContext(connection) as queries:
                assert client.get(url).status_code == 200
            found[url] = len(queries)
        return found

    make_rows(1, datacenter)
    one = counts()
    make_rows(6, datacenter)
    assert counts() == one
    assert Datacenter.objects.count() == 1
