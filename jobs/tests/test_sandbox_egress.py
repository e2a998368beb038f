"""The local sandbox's way out and its runtime builds: internet per datacenter (never the host's
loopback), names that resolve inside, and pip install of hostile packages sandboxed."""

import json
import os
import shutil
import socket
import threading
from pathlib import Path

import psutil
import pytest

from jobs.live import logstore
from jobs.tests.test_local_backend import run_until_done, submit
from jobs.tests.test_sandbox import job_ns, set_config, tcp_open
from tests.support import ROOT, wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_job_left_behind")]


EGRESS = r"""
import os, socket
port = int(os.environ["PORT"])
for name, host in (("outward", os.environ["OUTWARD"]), ("host loopback", "10.0.2.2"), ("loopback", "127.0.0.1")):
    try:
        socket.create_connection((host, port), timeout=3).recv(10)
        print(name, "reached", flush=True)
    except OSError as e:
        print(name, "refused", type(e).__name__, flush=True)
"""


@pytest.fixture
def host_server():
    """A TCP server of the host's on all its addresses; yields (an outward address, port)."""
    outward = next(a.address for addrs in psutil.net_if_addrs().values() for a in addrs
                   if a.family == socket.AF_INET and not a.address.startswith("127."))
    server = socket.create_server(("0.0.0.0", 0))
    stop = threading.Event()

    def serve():
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            conn.sendall(b"hi")
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield outward, server.getsockname()[1]
    stop.set()
    thread.join(5)
    server.close()


@pytest.mark.parametrize("internet", [True, False])
def test_internet_is_a_datacenter_setting_and_never_opens_the_hosts_loopback(alice, host_server, internet,
                                                                            launcher_service):
    outward, port = host_server
    assert tcp_open(port)  # the server answers on the host's loopback
    set_config(internet=internet)
    job = run_until_done(submit(alice, "egress", {"train.py": EGRESS}, mode="collective", pservers=0, trainers=1,
                                env={"OUTWARD": outward, "PORT": str(port)}))
    text = logstore.read(job.replicas.get()).text
    assert ("outward reached" in text) is internet, text
    assert "host loopback refused" in text and "loopback refused" in text, text
    # The way out went with the job.
    assert not (launcher_service.state / "slirp4netns" / f"{job_ns(launcher_service, job)}.pid").exists()
    slirps = [p for p in psutil.Process(launcher_service.proc.pid).children() if p.name() == "slirp4netns"]
    assert slirps == []


METADATA = r"""
import os, socket, time
for host in (os.environ["LINK_LOCAL"], "100.100.100.200"):
    began = time.monotonic()
    try:
        socket.create_connection((host, int(os.environ["PORT"])), timeout=10).recv(10)
        print(host, "reached", flush=True)
    except OSError as e:
        print(host, "refused", type(e).__name__, round(time.monotonic() - began), flush=True)
deadline = time.monotonic() + 60  # the test looks at slirp4netns meanwhile
while not os.path.exists(os.environ["GO"]) and time.monotonic() < deadline:
    time.sleep(0.05)
"""


@pytest.fixture
def link_local(host_server):
    """As root, a link-local address of the host's (where a cloud serves its metadata), on which
    host_server answers; rootless, an address nothing serves (the job's route is what is tested)."""
    import subprocess

    if not ROOT:
        yield "169.254.99.99"
        return
    address = ["169.254.99.99/32", "dev", "lo"]  # lo: containers' kernels may lack dummy links
    subprocess.run(["ip", "addr", "add", *address], check=True)
    try:
        socket.create_connection(("169.254.99.99", host_server[1]), timeout=5).close()  # the host reaches it
        yield "169.254.99.99"
    finally:
        subprocess.run(["ip", "addr", "delete", *address], check=True)


def test_a_job_with_internet_never_reaches_the_clouds_metadata_service(alice, host_server, link_local,
                                                                      launcher_service):
    from jobs.tasks import launch_job
    from pfs.paths import home

    set_config(internet=True)
    go = home(alice, "local").child("go")
    job = submit(alice, "metadata", {"train.py": METADATA}, mode="collective", pservers=0, trainers=1,
                 env={"LINK_LOCAL": link_local, "PORT": str(host_server[1]), "GO": go.virtual})
    launch_job(job.pk)
    slirp = wait_for(lambda: next((p for p in psutil.Process(launcher_service.proc.pid).children()
                                   if p.name() == "slirp4netns"), None), 60, what="slirp4netns")
    # It parses the job's packets: in a mount namespace of its own, behind a seccomp filter.
    assert "Seccomp:\t2" in Path(f"/proc/{slirp.pid}/status").read_text()
    assert os.stat(f"/proc/{slirp.pid}/ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino
    go.disk.write_text("")
    job = run_until_done(job)
    text = logstore.read(job.replicas.get()).text
    # Refused at once by the namespace's own route, not after slirp4netns tried the host's network.
    assert f"{link_local} refused OSError 0" in text, text
    assert "100.100.100.200 refused OSError 0" in text, text


def test_the_sandbox_resolves_its_own_hostname_and_user_as_gloo_and_getpass_need(alice):
    probe = ("import getpass, socket\n"
             "print('host', socket.gethostname(), socket.gethostbyname(socket.gethostname()), flush=True)\n"
             "print('user', getpass.getuser(), flush=True)\n")
    job = run_until_done(submit(alice, "names", {"train.py": probe}, mode="collective", pservers=0, trainers=1))
    assert job.state == "Succeeded", job.message
    text = logstore.read(job.replicas.get()).text
    assert "host names-trainer-0 127.0.0.1" in text and "user alice" in text


EVIL_SETUP = r"""
import json, os, socket, sys
from setuptools import setup

result = {"uid": os.getuid()}
for name, path in json.loads('CHECKS_JSON').items():
    try:
        open(path, "rb").read(1)
        result[name] = "ok"
    except OSError as e:
        result[name] = type(e).__name__
for name, port in (("redis", 6379), ("postgresql", 5432)):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        result[name] = "ok"
    except OSError as e:
        result[name] = type(e).__name__
with open(os.path.join(sys.prefix, "evil-probe.json"), "w") as f:
    json.dump(result, f)
setup(name="evil", version="0.1", py_modules=[])
"""


@pytest.fixture
def evil_index(tmp_path, host_server, settings):
    """An sdist whose setup script probes its surroundings, served over HTTP on the host's outward address."""
    import http.server
    import tarfile

    src = tmp_path / "evil-0.1"
    src.mkdir()
    checks = {"secret key": str(settings.VAR_DIR / "secret.key"), "environ": f"/proc/{os.getpid()}/environ",
              "pfs": str(settings.PFS_ROOT)}
    (src / "setup.py").write_text(EVIL_SETUP.replace("CHECKS_JSON", json.dumps(checks)))
    (src / "PKG-INFO").write_text("Metadata-Version: 1.0\nName: evil\nVersion: 0.1\n")
    served = tmp_path / "served"
    served.mkdir()
    with tarfile.open(served / "evil-0.1.tar.gz", "w:gz") as tar:
        tar.add(src, arcname="evil-0.1")
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(served))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("0.0.0.0", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{host_server[0]}:{server.server_address[1]}/evil-0.1.tar.gz"
    server.shutdown()
    server.server_close()


def test_pip_install_runs_setup_scripts_sandboxed_as_the_build_uid(alice, evil_index, settings):
    from jobs.backends.local import runtime

    requirements = f"evil @ {evil_index}#sha256_marker={os.getpid()}\n"
    files = {"train.py": "print('ran', flush=True)\n", "requirements.txt": requirements}
    job = run_until_done(submit(alice, "evilreq", files, mode="collective", pservers=0, trainers=1,
                                env={"UNUSED": "1"}), timeout=300)
    venv = runtime.env_dir(requirements)
    try:
        assert job.state == "Succeeded", job.message
        probe = json.loads((venv / "evil-probe.json").read_text())
        # The build uid (the first of the range), not root; rootless, a uid of its own user namespace.
        assert probe["uid"] == (int(settings.JOB_UIDS.split("-")[0]) if ROOT else 1000)
        assert probe["redis"] == probe["postgresql"] == "ConnectionRefusedError"
        assert probe["secret key"] == probe["environ"] == "FileNotFoundError"
        assert probe["pfs"] == "FileNotFoundError"
        # Given back to the service: nothing of it stays writable by the build uid.
        assert (venv / "evil-probe.json").lstat().st_uid == (venv / "bin" / "python").lstat().st_uid == os.getuid()
    finally:
        shutil.rmtree(venv, ignore_errors=True)
