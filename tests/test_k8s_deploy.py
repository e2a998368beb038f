# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""Deploying the service: every manifest in deploy/kubernetes validates against the real
OpenAPI schemas, and the service account's RBAC allows every request the backend and the
watcher actually make (the emulated API server authorizes each by deploy/kubernetes/rbac.yaml
in every Kubernetes test, jobs/tests/k8s_rbac.py) and grants nothing a job's life does not use."""

import functools
import re
from pathlib import Path

import kubernetes_validate
import kubernetes_validate.utils
import pytest
import yaml

from jobs.models import JobState
from jobs.tests.k8s_fixtures import Part, cluster, k8s_dc, launch, ns_of, submit  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(kubernetes_validate.utils.schema_contents)


def documents():
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def test_every_deploy_manifest_validates():
    names = []
    for _, doc in documents():
        kubernetes_validate.validate(doc, "1.37", strict=True)
        names.append(f"{doc['kind']}/{doc['metadata']['name']}")
    for needed in ("Deployment/web", "Deployment/worker", "Deployment/watcher", "StatefulSet/postgres",
                   "Deployment/redis", "PersistentVolumeClaim/paddlecloud-pfs", "ServiceAccount/paddlecloud",
                   "ClusterRole/paddlecloud-jobs"):
        assert needed in names
    kustomization = yaml.safe_load((DEPLOY / "kubernetes" / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted({f for f, _ in documents()})


def test_the_dockerfile_installs_the_pinned_requirements_and_runs_unprivileged():
    text = (DEPLOY / "Dockerfile").read_text()
    assert "pip install --no-cache-dir -r requirements.txt" in text and "USER 10001" in text
    for app in ("paddleweb", "core", "accounts", "jobs", "pfs", "quotas", "legacy", "notifications", "templates",
                "static"):
        assert f"COPY {app} {app}" in text


def test_the_web_server_runs_uvicorn_with_the_zero_copy_protocol_everywhere():
    """The Procfile, the image and the web Deployment start the same server: uvicorn (which
    requirements.txt installs; daphne is a test-only package) with core.server's protocol, and
    without websocket compression (compressing each viewer's copy of a log push would cost more
    than all else: jobs/tests/test_live_logs.py)."""
    import shlex

    procfile = dict(line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if line)
    image_cmd = yaml.safe_load((DEPLOY / "Dockerfile").read_text().split("\nCMD ", 1)[1])
    web = next(doc for _, doc in documents() if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "web")
    pod_cmd = web["spec"]["template"]["spec"]["containers"][0]["command"]
    # The Procfile's lines start with $PADDLECLOUD_AS: `make run`'s drop to the service account, if root.
    for argv in (shlex.split(procfile["web"].removeprefix("$PADDLECLOUD_AS ")), image_cmd, pod_cmd):
        assert argv[:2] == ["uvicorn", "paddleweb.asgi:application"], argv
        assert argv[argv.index("--http") + 1] == "core.server:HttpProtocol", argv
        assert argv[argv.index("--ws-per-message-deflate") + 1] == "false", argv
    assert any(line.startswith("uvicorn==") for line in (ROOT / "requirements.txt").read_text().splitlines())


def granted() -> set[tuple[str, str, str]]:
    out = set()
    for _, doc in documents():
        if doc["kind"] in ("ClusterRole", "Role"):
            for rule in doc["rules"]:
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        for v in rule["verbs"]:
                            out.add((g, r, v))
    return out


def to_permission(method: str, path: str) -> tuple[str, str, str]:
    url, _, query = path.partition("?")
    parts = url.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource = rest[0] + (f"/{rest[2]}" if len(rest) > 2 else "")
    named = len(rest) > 1
    verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method)
    if verb is None:
        verb = "watch" if re.search(r"(^|&)watch=(true|1)", query) else ("get" if named else "list")
    return group, resource, verb


@pytest.mark.django_db(transaction=True)
def test_rbac_allows_every_request_of_a_jobs_life_and_no_more(alice, cluster, k8s_dc):
    from jobs.backends.kubernetes import informer as k8s_informer
    from jobs.services import kill_job
    from jobs.tasks import delete_job_task, stop_job

    part = Part()
    try:
        job = submit(alice, "fit")
        launch(job)
        ns = ns_of(job)
        part.until(lambda: part.part.watchers and part.watcher().state.ready(), what="watches")
        for pod in cluster.run_statefulset(ns, "fit-pserver"):
            cluster.pod_running(ns, pod)
            cluster.log(ns, pod, "up")
        cluster.statefulset_ready(ns, "fit-pserver", 2)
        part.until(lambda: ("jobs", "fit-trainer") in cluster.objects_in(ns), what="trainers")
        for pod in cluster.run_job(ns, "fit-trainer"):
            cluster.pod_running(ns, pod)
        part.until(lambda: part.job(job).state == JobState.RUNNING, what="Running")
        kill_job(job)
        stop_job.run(job.pk)
        job.refresh_from_db()
        job.deleting = True
        job.save()
        delete_job_task.run(job.pk)
    finally:
        part.part.stop()
        k8s_informer.stop_all()
    used = {to_permission(m, p) for _, m, p in cluster.requests}
    allowed = granted()
    assert used - allowed == set()
    # Granted but not used in this life: only what optional features need.
    optional = {
        ("", "configmaps/finalizers", "update"),  # checked by an admission plugin, not requested
        ("", "secrets", "create"), ("", "secrets", "update"), ("", "secrets", "get"),  # registries, copies
        ("apps", "statefulsets", "delete"), ("batch", "jobs", "delete"),  # stopping only one role
        ("batch", "jobs", "get"), ("", "secrets", "delete"),  # image builds (their short-lived secrets)
        ("", "resourcequotas", "update"), ("networking.k8s.io", "networkpolicies", "update"),  # changed settings
        ("metrics.k8s.io", "pods", "list"),  # usage, where metrics-server serves it (test_k8s_usage.py)
    } | GANG_LIFE  # gang scheduling, restarts, suspend
    assert allowed - used - optional == set()


# What only a gang-scheduled job's life with a gang restart and a suspend asks for (below).
GANG_LIFE = {("scheduling.volcano.sh", "podgroups", v) for v in ("list", "watch", "create", "delete")} | {
    ("kueue.x-k8s.io", "workloads", "list"), ("kueue.x-k8s.io", "workloads", "watch"),
    ("batch", "jobs", "patch"), ("apps", "statefulsets", "patch"), ("", "services", "delete"),
    ("jobset.x-k8s.io", "jobsets", "create"), ("jobset.x-k8s.io", "jobsets", "delete")}  # a pserver job under Kueue


@pytest.mark.django_db(transaction=True)
def test_rbac_allows_a_gang_scheduled_jobs_restart_and_suspend(alice, cluster, k8s_dc):
    from jobs.backends.kubernetes import informer as k8s_informer
    from jobs.backends.registry import get_backend
    from jobs.models import Replica
    from jobs.tests.k8s_fixtures import FAST

    for config in ({"gang_scheduler": "volcano"}, {"gang_scheduler": "kueue", "kueue_queue": "q"}):
        k8s_dc.config = {**FAST, **config}
        k8s_dc.save()
        part = Part()
        try:
            job = submit(alice, f"fit-{config['gang_scheduler']}")
            launch(job)
            part.until(lambda p=part: p.part.watchers and p.watcher().state.ready(), what="watches")
            backend = get_backend(job.datacenter)
            backend.stop(job, list(job.replicas.all()))
            Replica.objects.filter(job=job).update(attempt=1)
            backend.restart(job, list(job.replicas.all()))
            backend.suspend(job)
        finally:
            part.part.stop()
            k8s_informer.stop_all()
    used = {to_permission(m, p) for _, m, p in cluster.requests}
    assert used - granted() == set()
    assert GANG_LIFE - used == set(), "each is needed by some step of this life"
