"""The job spec (jobs/spec.py) is the one declaration of a job's fields: the page's form, the API's
submit serializer, its OpenAPI schema, the model's columns and constraints all carry its
defaults, bounds and help texts, and the smallest submission gets the same sensible job on every
surface."""

import pytest
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import IntegrityError, transaction

from jobs import spec
from jobs.api.serializers import JobSerializer
from jobs.forms import JobForm
from jobs.models import Job
from jobs.submission.serializer import JobSubmitSerializer
from tests.support import make_package

pytestmark = pytest.mark.django_db

MINIMAL = {"name": "fit", "entry": "python train.py"}


@pytest.fixture
def pkg(alice):
    return make_package(alice, "fit", {"train.py": ""})


def test_the_form_has_the_spec_fields_with_their_defaults_bounds_and_help(alice):
    form = JobForm(user=alice)
    for f in spec.surface("form"):
        field = form.fields[f.name]
        assert f.help in field.help_text, f.name
        # The page writes env as NAME=value lines and preselects the default datacenter by name.
        if not f.required and f.kind not in ("env", "ref"):
            assert field.initial == spec.defaults()[f.name], f.name
        if f.kind == "int":
            assert (field.min_value, field.max_value) == (f.min, f.max), f.name
        elif f.max_length and f.kind not in ("choice", "ref"):
            assert field.max_length == f.max_length, f.name
    assert form.fields["datacenter"].initial == settings.DEFAULT_DATACENTER
    assert set(form.fields) - {f.name for f in spec.surface("form")} == {"source", "files"}


def test_the_submit_page_shows_every_spec_field_in_its_section(client, alice, datacenter):
    client.force_login(alice)
    page = client.get("/jobs/new/").content.decode()
    for f in spec.surface("form"):
        assert f'id="field-{f.name}"' in page, f.name
        start = page.index(f"<legend>{f.group}</legend>")
        end = page.find("<legend>", start + 1)
        assert start < page.index(f'id="field-{f.name}"') < (end if end != -1 else len(page)), f.name


def test_the_serializer_has_exactly_the_spec_fields_with_their_defaults_and_bounds():
    assert set(JobSerializer().fields) >= {f.name for f in spec.SPEC}  # what a job shows has them all too
    fields = JobSubmitSerializer().fields
    assert list(fields) == [f.name for f in spec.surface("api")]
    for f in spec.surface("api"):
        field = fields[f.name]
        assert field.help_text == f.help and field.required == f.required, f.name
        if not f.required:
            assert field.default == spec.defaults()[f.name], f.name
        if f.kind == "int":
            assert (field.min_value, field.max_value) == (f.min, f.max), f.name


def test_the_openapi_schema_publishes_the_spec(alice_api):
    schema = alice_api.get("/api/v2/schema/?format=json").json()["components"]["schemas"]["JobSubmit"]
    assert list(schema["properties"]) == [f.name for f in spec.surface("api")]
    assert sorted(schema["required"]) == sorted(f.name for f in spec.SPEC if f.required)
    for f in spec.surface("api"):
        prop = schema["properties"][f.name]
        assert prop["description"].startswith(f.help), f.name
        if not f.required:
            assert prop.get("default") == spec.defaults()[f.name], f.name  # a None default is left out
        if f.kind == "int":
            assert (prop["minimum"], prop["maximum"]) == (f.min, f.max), f.name
    assert schema["properties"]["name"]["pattern"] == spec.NAME_PATTERN


def test_the_model_columns_and_constraints_come_from_the_spec():
    for f in spec.SPEC:
        if f.kind == "ref":
            continue
        column = Job._meta.get_field(f.name)
        assert column.help_text == f.help, f.name
        if f.kind not in ("int", "env"):
            assert column.max_length == f.max_length, f.name
        if not f.required:
            assert column.get_default() == spec.defaults()[f.name], f.name
    names = {c.name for c in Job._meta.constraints}
    assert {f"job_{f.name}_range" for f in spec.SPEC if f.kind == "int"} <= names


@pytest.mark.parametrize("column,value", [("trainers", 0), ("pservers", spec.MAX_PSERVERS + 1), ("mode", "mpi"),
                                          ("name", "bad_name"), ("timeout", 0)])
def test_the_database_refuses_what_the_spec_refuses(alice, datacenter, column, value):
    fields = {"name": "fit", "package": "/pfs/local/home/alice/jobs/fit", "entry": "python train.py", column: value}
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.create(user=alice, datacenter=datacenter, **fields)


def test_the_minimal_api_request_submits_a_sensible_job(alice_api, pkg):
    res = alice_api.post("/api/v2/jobs/", {**MINIMAL, "package": pkg}, format="json")
    assert res.status_code == 201, res.json()
    job = Job.objects.get()
    assert {k: getattr(job, k) for k in spec.defaults() if k not in ("datacenter", "registry")} == {
        k: v for k, v in spec.defaults().items() if k not in ("datacenter", "registry")}
    assert (job.mode, job.pservers, job.trainers, job.passes) == ("ps", 1, 1, 1)
    assert [r["name"] for r in res.json()["replicas"]] == ["pserver-0", "trainer-0"]


def test_collective_mode_defaults_to_no_pservers(alice_api, pkg):
    res = alice_api.post("/api/v2/jobs/", {**MINIMAL, "package": pkg, "mode": "collective"}, format="json")
    assert res.status_code == 201, res.json()
    assert res.json()["pservers"] == 0


def test_the_form_with_its_initial_values_submits_the_same_job_as_the_api(client, alice, datacenter):
    client.force_login(alice)
    form = JobForm(user=alice)
    post = {name: "" if field.initial is None else field.initial for name, field in form.fields.items()
            if name != "files"}
    post.update(MINIMAL, files=[SimpleUploadedFile("train.py", b"")])
    res = client.post("/jobs/new/", post)
    assert res.status_code == 302, res.context["form"].errors
    job = Job.objects.get()
    for name, default in spec.defaults().items():
        if name not in ("datacenter", "registry"):
            assert getattr(job, name) == default, name


def test_a_non_object_body_is_a_400(alice_api):
    res = alice_api.post("/api/v2/jobs/", ["fit"], format="json")
    assert res.status_code == 400 and "object" in res.json()["non_field_errors"][0]

