"""A request's objects are freed by reference counting once its response is made, not left to
Python's cycle collector (core/release.py), and the answers stay what they were."""

import asyncio
import gc
import http.client
from collections import Counter

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.http import StreamingHttpResponse
from django.test import RequestFactory
from rest_framework.response import Response
from rest_framework.test import APIClient

from accounts.services import issue_token
from core.release import release
from jobs.api.serializers import JobDetailSerializer
from jobs.models import JobEvent, Replica
from tests.support import LiveASGI, make_job, request_garbage, wait_for

HOST = "testserver"  # as Django's test client names the host (the list's links carry it)


async def asgi_get(app, path: str, token: str) -> tuple[int, bytes]:
    """GET `path` from the ASGI `app` with a token, as a server would hand it over."""
    path, _, query = path.partition("?")
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": query.encode(), "root_path": "",
             "server": (HOST, 80), "client": ("127.0.0.1", 50000),
             "headers": [(b"host", HOST.encode()), (b"authorization", f"Token {token}".encode())]}
    asked, sent = False, []
    answered = asyncio.Event()

    async def receive():
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await answered.wait()  # then a disconnect, as uvicorn says once the response is sent
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)
        if message["type"] == "http.response.body" and not message.get("more_body"):
            answered.set()

    await app(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


@pytest.fixture
def finished_job(alice, datacenter):
    """A job as a finished one looks: 2 pservers, 2 trainers, their events and the job's."""
    job = make_job(alice, datacenter, name="done", state="Succeeded")
    for role in ("pserver", "trainer"):
        for k in range(2):
            r = Replica.objects.create(job=job, role=role, index=k, state="Succeeded", host="127.0.0.1",
                                       port=8000 + k, exit_code=0)
            JobEvent.objects.create(job=job, replica=r, state="Running", reason="Started", message="running")
    for state in ("Queued", "Running", "Succeeded"):
        JobEvent.objects.create(job=job, state=state, reason=state, message=f"the job is {state}")
    return job


@pytest.mark.django_db(transaction=True)
def test_a_job_detail_and_a_job_list_leave_nothing_to_the_cycle_collector(alice, finished_job):
    """Before: about 400 objects per detail and 600 per list page, each in a reference cycle."""
    from paddleweb.asgi import application

    token = issue_token(alice)
    paths = [f"/api/v2/jobs/{finished_job.name}/", "/api/v2/jobs/"]

    async def unreachable_after_requests() -> Counter[str]:
        for path in paths:  # the first of each compiles its statements and fills caches
            await asgi_get(application, path, token)
        gc.collect()
        gc.disable()
        try:
            for path in paths * 3:
                status, _ = await asgi_get(application, path, token)
                assert status == 200
            return request_garbage()
        finally:
            gc.enable()

    assert asyncio.run(unreachable_after_requests()) == {}


@pytest.mark.django_db(transaction=True)
def test_requests_served_by_uvicorn_leave_nothing_to_the_cycle_collector(alice, finished_job):
    """The same through the Procfile's server (core/server.py), on one keep-alive connection."""
    from paddleweb.asgi import request_threads

    token = issue_token(alice)
    paths = [f"/api/v2/jobs/{finished_job.name}/", "/api/v2/jobs/"]
    busy = request_threads.busy  # requests of earlier tests that never ended, if any
    with LiveASGI() as live:
        conn = http.client.HTTPConnection("127.0.0.1", live.port, timeout=60)

        def get(path: str) -> None:
            conn.request("GET", path, headers={"Authorization": f"Token {token}"})
            answer = conn.getresponse()
            answer.read()
            assert answer.status == 200
            # the request ends (its thread given back) just after its answer is sent
            wait_for(lambda: request_threads.busy == busy, 30, "the request to end")

        for path in paths:
            get(path)
        gc.collect()
        gc.disable()
        try:
            for path in paths * 3:
                get(path)
            found = request_garbage()
        finally:
            gc.enable()
        conn.close()
    assert found == {}


@pytest.mark.django_db(transaction=True)
def test_job_details_and_full_job_lists_run_no_garbage_collection(alice, datacenter, finished_job):
    """Their objects are freed as they go, so the web process's young-collection threshold
    (core/startup.py) is not reached; at CPython's 700 these requests ran collections."""
    from paddleweb.asgi import application

    for i in range(60):  # a full page
        make_job(alice, datacenter, name=f"job-{i}", state="Succeeded")
    token = issue_token(alice)
    paths = [f"/api/v2/jobs/{finished_job.name}/", "/api/v2/jobs/"]
    collections = []

    def count(phase, info):
        if phase == "start":
            collections.append(info["generation"])

    async def serve():
        for path in paths:  # warm
            await asgi_get(application, path, token)
        gc.collect()
        gc.callbacks.append(count)
        try:
            for path in paths * 5:
                status, _ = await asgi_get(application, path, token)
                assert status == 200
        finally:
            gc.callbacks.remove(count)

    asyncio.run(serve())
    assert collections == []


@pytest.mark.django_db(transaction=True)
def test_the_answers_are_those_of_djangos_test_client(alice, finished_job):
    from paddleweb.asgi import application

    token = issue_token(alice)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    for path in [f"/api/v2/jobs/{finished_job.name}/", "/api/v2/jobs/", "/api/v2/jobs/?state=Succeeded",
                 "/api/v2/jobs/nothing/", "/jobs/"]:
        expected = client.get(path)
        status, body = asyncio.run(asgi_get(application, path, token))
        assert (status, body) == (expected.status_code, expected.content), path


@pytest.mark.django_db
def test_a_released_serializer_gives_the_same_data_and_binds_its_fields_again(alice, finished_job, rf):
    serializer = JobDetailSerializer(finished_job)
    data = serializer.data
    view, api_request = type("View", (), {})(), type("Request", (), {})()
    view.response, api_request.view = "response", view  # the view and DRF's request name each other
    response = Response(data)
    response.renderer_context = {"view": view, "request": api_request, "response": response}
    request = rf.get("/api/v2/jobs/done/")
    request.marker = "set by a middleware"
    release(request, response)
    assert response.renderer_context is None
    assert vars(view) == vars(api_request) == vars(request) == {}
    assert "fields" not in vars(serializer)
    assert serializer.data == data and response.data is data
    assert list(serializer.fields) == JobDetailSerializer.Meta.fields  # bound again when asked for
    assert len(serializer.fields["replicas"].child.fields) == len(serializer.fields["replicas"].child.Meta.fields)


@pytest.mark.unit
def test_a_streaming_responses_request_is_left_alone():
    """Its body is made while it is sent, maybe from the request's objects."""
    request = RequestFactory().get("/")
    request.marker = "read by the body"
    release(request, StreamingHttpResponse(iter([b"body"])))
    assert request.marker == "read by the body"


@pytest.mark.unit
def test_the_uploaded_files_are_closed():
    request = RequestFactory().post("/", {"file": SimpleUploadedFile("a.txt", b"x" * 10)})
    upload = request.FILES["file"]
    release(request, Response({}))
    assert upload.closed
