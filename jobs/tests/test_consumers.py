"""Live job updates over websockets, with Channels' WebsocketCommunicator and the real Redis layer."""

import asyncio
import json

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator

from jobs import services
from jobs.live import notify
from paddleweb.asgi import application
from tests.support import make_package

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def job(alice):
    pkg = make_package(alice, "fit", {"train.py": ""})
    return services.submit_job(alice, {"name": "fit", "package": pkg, "entry": "python train.py", "pservers": 1})


# Generous: a busy machine (or 150 viewers at once) may take seconds; a passing test never waits it out.
DEADLINE = 30


async def connect(client, name="fit"):
    cookie = client.cookies["sessionid"].value if "sessionid" in client.cookies else ""
    comm = WebsocketCommunicator(application, f"/ws/jobs/{name}/",
                                 headers=[(b"cookie", f"sessionid={cookie}".encode()), (b"origin", b"http://testserver"),
                                          (b"host", b"testserver")])
    connected, code = await comm.connect(timeout=DEADLINE)
    return comm, connected, code


async def test_the_owner_gets_the_state_then_pushed_changes_and_logs(client, job):
    await sync_to_async(client.force_login)(job.user)
    comm, connected, _ = await connect(client)
    assert connected
    assert await comm.receive_json_from(timeout=DEADLINE) == {"type": "job", "state": "Queued", "reason": ""}

    await sync_to_async(services.kill_job)(job)
    msg = await comm.receive_json_from(timeout=DEADLINE)
    assert msg["type"] == "job" and msg["state"] == "Killed"

    await sync_to_async(notify.log_data)(job.pk, "trainer-0", 0, "hello\n", 6)
    assert await comm.receive_json_from(timeout=DEADLINE) == {
        "type": "log", "replica": "trainer-0", "offset": 0, "text": "hello\n", "next_offset": 6}

    await sync_to_async(notify.log_notice)(job.pk, "trainer-0", "the kubelet does not answer")
    assert await comm.receive_json_from(timeout=DEADLINE) == {
        "type": "log_notice", "replica": "trainer-0", "notice": "the kubelet does not answer"}
    await comm.disconnect(timeout=DEADLINE)


async def test_an_idle_subscriber_stays_subscribed(client, job):
    await sync_to_async(client.force_login)(job.user)
    comm, connected, _ = await connect(client)
    assert connected
    assert (await comm.receive_json_from(timeout=DEADLINE))["state"] == "Queued"
    # Longer than one blocking read in Redis, so the layer has to wait again with no error.
    assert await comm.receive_nothing(timeout=get_channel_layer().brpop_timeout + 2)
    await sync_to_async(services.kill_job)(job)
    assert (await comm.receive_json_from(timeout=DEADLINE))["state"] == "Killed"
    await comm.disconnect(timeout=DEADLINE)


async def test_a_job_named_with_dots_and_capitals_is_followed_at_its_name(client, job):
    named = await sync_to_async(services.submit_job)(job.user, {
        "name": "My.Job", "package": job.package, "entry": "python train.py", "cpu": "100m", "pscpu": "100m"})
    await sync_to_async(client.force_login)(job.user)
    comm, connected, _ = await connect(client, "My.Job")
    assert connected
    assert (await comm.receive_json_from(timeout=DEADLINE))["state"] == "Queued"
    await sync_to_async(services.kill_job)(named)
    assert (await comm.receive_json_from(timeout=DEADLINE))["state"] == "Killed"
    await comm.disconnect(timeout=DEADLINE)


async def test_another_user_cannot_subscribe(client, job, bob):
    await sync_to_async(client.force_login)(bob)
    comm, connected, code = await connect(client)
    assert not connected and code == 4403


async def test_anonymous_cannot_subscribe(client, job):
    comm, connected, code = await connect(client)
    assert not connected and code == 4403


async def connect_with_token(token: str, name="fit"):
    comm = WebsocketCommunicator(application, f"/ws/jobs/{name}/",
                                 headers=[(b"authorization", f"Token {token}".encode()), (b"host", b"testserver")])
    connected, code = await comm.connect(timeout=DEADLINE)
    return comm, connected, code


async def test_an_api_token_subscribes_without_a_session_or_origin(job, alice):
    from accounts.services import issue_token

    comm, connected, _ = await connect_with_token(await sync_to_async(issue_token)(alice))
    assert connected
    assert (await comm.receive_json_from(timeout=DEADLINE))["state"] == "Queued"
    await sync_to_async(services.kill_job)(job)
    assert (await comm.receive_json_from(timeout=DEADLINE))["state"] == "Killed"
    await comm.disconnect(timeout=DEADLINE)


async def test_a_wrong_or_another_users_token_cannot_subscribe(job, bob):
    from accounts.services import issue_token

    for token in ("nope", await sync_to_async(issue_token)(bob)):
        comm, connected, code = await connect_with_token(token)
        assert not connected and code == 4403


async def test_log_output_goes_to_every_viewer_as_encoded_once_by_the_pusher(client, job):
    await sync_to_async(client.force_login)(job.user)
    comms = []
    for _ in range(3):
        comm, connected, _ = await connect(client)
        assert connected and (await comm.receive_json_from(timeout=DEADLINE))["type"] == "job"
        comms.append(comm)
    await sync_to_async(notify.log_data)(job.pk, "trainer-0", 6, "wörld \"quoted\"\n", 22)
    frames = [await comm.receive_from(timeout=DEADLINE) for comm in comms]
    assert len(set(frames)) == 1  # the same text for all, not re-encoded per viewer
    assert json.loads(frames[0]) == {"type": "log", "replica": "trainer-0", "offset": 6,
                                     "text": "wörld \"quoted\"\n", "next_offset": 22}
    for comm in comms:
        await comm.disconnect(timeout=DEADLINE)


async def test_many_viewers_leaving_at_once_all_leave_cleanly(client, job):
    """Each viewer leaves the job's group as it closes; 150 at once outnumber redis-py's default
    pool (100 connections), which failed the rest with MaxConnectionsError."""
    await sync_to_async(client.force_login)(job.user)
    comms = [comm for comm, connected, _ in await asyncio.gather(*(connect(client) for _ in range(150)))
             if connected]
    assert len(comms) == 150
    await asyncio.gather(*(comm.disconnect(timeout=DEADLINE) for comm in comms))  # raises what a consumer raised


async def streams(comm, job, line) -> bool:
    """Whether a log line pushed now reaches the socket (False: it was closed instead)."""
    await sync_to_async(notify.log_data)(job.pk, "trainer-0", 0, line, len(line))
    out = await comm.receive_output(timeout=DEADLINE)
    if out["type"] == "websocket.close":
        assert out["code"] == 4401
        return False
    return json.loads(out["text"])["text"] == line


async def test_a_revoked_token_ends_the_stream_it_opened(job, alice, settings):
    """The tokens page promises "Whatever uses it stops working": a leaked token's stream too."""
    from accounts.models import ApiToken
    from accounts.services import create_token, revoke_token

    settings.LIVE_RECHECK_SECONDS = 0
    info, secret = await sync_to_async(create_token)(alice, name="laptop")
    comm = WebsocketCommunicator(application, "/ws/jobs/fit/",
                                 headers=[(b"authorization", f"Token {secret}".encode()), (b"host", b"testserver")])
    assert (await comm.connect(timeout=DEADLINE))[0]
    assert (await comm.receive_json_from(timeout=DEADLINE))["state"] == "Queued"
    assert await streams(comm, job, "before\n")
    token = await sync_to_async(ApiToken.objects.select_related("auth_token").get)(pk=info.pk)
    await sync_to_async(revoke_token)(token)
    assert not await streams(comm, job, "after\n")


@pytest.mark.parametrize("withdraw", ["logout", "deactivate"])
async def test_a_session_logged_out_or_deactivated_ends_its_streams(client, job, alice, settings, withdraw):
    settings.LIVE_RECHECK_SECONDS = 0
    await sync_to_async(client.force_login)(alice)
    comm, connected, _ = await connect(client)
    assert connected and (await comm.receive_json_from(timeout=DEADLINE))["state"] == "Queued"
    assert await streams(comm, job, "before\n")
    if withdraw == "logout":
        assert (await sync_to_async(client.post)("/logout/")).status_code == 302
    else:
        alice.is_active = False
        await sync_to_async(alice.save)()
    assert not await streams(comm, job, "after\n")


async def test_credentials_are_checked_again_only_after_the_interval(client, job, alice, settings):
    """Pushes cost no query in between: a logout shows after LIVE_RECHECK_SECONDS, not before."""
    settings.LIVE_RECHECK_SECONDS = 3600
    await sync_to_async(client.force_login)(alice)
    comm, connected, _ = await connect(client)
    assert connected and (await comm.receive_json_from(timeout=DEADLINE))["state"] == "Queued"
    alice.is_active = False
    await sync_to_async(alice.save)()
    assert await streams(comm, job, "within the interval\n")
    await comm.disconnect(timeout=DEADLINE)
