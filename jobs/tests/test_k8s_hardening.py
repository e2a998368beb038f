# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""Tenant isolation on Kubernetes, read back over HTTP from the emulated API server after real
launches: every pod template is hardened, and the NetworkPolicies the backend made (with the
control plane's own, from deploy/) let a job's pods reach each other and nothing of anyone
else's, judged by an evaluator of NetworkPolicy semantics (k8s_netpol.py)."""

import itertools
from pathlib import Path

import pytest
import yaml

from jobs.backends.kubernetes import manifests, runtime
from jobs.backends.kubernetes.informer import JOB, STATEFULSET, ClusterState
from jobs.backends.registry import get_backend
from jobs.models import Job

from .k8s_fixtures import cluster, k8s_dc, launch, ns_of, submit  # noqa: F401
from .k8s_netpol import Cluster as Policies
from .k8s_netpol import Endpoint

pytestmark = pytest.mark.django_db
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
INTERNET, METADATA, API_SERVER = "8.8.8.8", "169.254.169.254", "10.96.0.1"


def deploy_docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def assert_hardened(spec: dict, uid: int | None = 10001) -> None:
    assert spec["automountServiceAccountToken"] is False
    assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    pod = spec["securityContext"]
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    if uid:
        assert pod["runAsNonRoot"] is True and pod["runAsUser"] == uid and pod["runAsGroup"] == uid
    else:
        assert "runAsUser" not in pod and "runAsNonRoot" not in pod
    for c in spec.get("initContainers", []) + spec["containers"]:
        assert c["securityContext"] == {"allowPrivilegeEscalation": False, "privileged": False,
                                        "capabilities": {"drop": ["ALL"]}}, c["name"]


def pod_templates(cluster, ns: str) -> list[dict]:
    """Every pod template of the namespace's workloads (a JobSet's as its own Jobs), and its pods."""
    out = [o["spec"]["template"]["spec"] for plural in ("statefulsets", "jobs") for o in cluster.store.find(plural, ns)
           if "jobset.sigs.k8s.io/jobset-name" not in o["metadata"]["labels"]]
    for js in cluster.store.find("jobsets", ns):
        out += [rj["template"]["spec"]["template"]["spec"] for rj in js["spec"]["replicatedJobs"]]
    return out + [p["spec"] for p in cluster.store.find("pods", ns)]


def start_ps_job(cluster, job) -> str:
    """Launch, run the pservers, let the trainers start (as the watcher would) and run them."""
    launch(job)
    ns = ns_of(job)
    cluster.run_statefulset(ns, f"{job.name}-pserver")
    cluster.statefulset_ready(ns, f"{job.name}-pserver", job.pservers)
    backend, seen = get_backend(job.datacenter), ClusterState("paddle-")
    seen.replace(STATEFULSET, cluster.store.find("statefulsets", ns))
    seen.replace(JOB, cluster.store.find("jobs", ns))
    assert backend.layout.advance(backend.ctx, job, ns, 0, seen, lambda: runtime.pod_options(backend.ctx, job))
    cluster.run_job(ns, f"{job.name}-trainer")
    return ns


@pytest.mark.parametrize("config", [{}, {"gang_scheduler": "kueue", "kueue_queue": "q"}, {"run_as_user": 0}],
                         ids=["raw", "jobset", "root"])
def test_every_pod_the_backend_emits_is_hardened(alice, k8s_dc, cluster, config):
    k8s_dc.config = {**k8s_dc.config, **config}
    k8s_dc.save()
    ps, collective = submit(alice, "fit"), submit(alice, "coll", mode="collective", pservers=0, trainers=2)
    if config.get("gang_scheduler"):
        launch(ps)
        launch(collective)
        ns = ns_of(ps)
    else:
        ns = start_ps_job(cluster, ps)
        launch(collective)
        cluster.run_job(ns, "coll-trainer")
    templates = pod_templates(cluster, ns)
    assert len(templates) == (2 + 1 if config.get("gang_scheduler") else 3 + 2 + 2 + 2)  # templates (+ pods)
    for spec in templates:
        assert_hardened(spec, uid=None if config.get("run_as_user") == 0 else 10001)


class World:
    """Every pod of the scenario as a network endpoint, and the cluster's policies."""

    def __init__(self, cluster, extra_namespaces: dict[str, dict] | None = None):
        self.cluster, self.ips, self.pods = cluster, itertools.count(10), {}
        self.namespaces = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in cluster.store.find(
            "namespaces")}
        for pod in cluster.store.find("pods"):
            md = pod["metadata"]
            self.add(f'{md["namespace"]}/{md["name"]}', md["namespace"], md.get("labels") or {})
        # The control plane as deploy/ makes it, and the cluster's DNS.
        [ns_doc] = deploy_docs("namespace.yaml")
        self.namespaces["paddlecloud"] = ns_doc["metadata"]["labels"]
        for name in ("postgres", "redis", "web", "worker"):
            tpl = next(d for d in deploy_docs(f"{name}.yaml") if d["kind"] in ("StatefulSet", "Deployment"))
            self.add(name, "paddlecloud", tpl["spec"]["template"]["metadata"]["labels"])
        self.namespaces["kube-system"] = {}
        self.add("dns", "kube-system", {"k8s-app": "kube-dns"})
        for name, labels in (extra_namespaces or {}).items():
            self.namespaces[name] = labels
            self.add(f"{name}-pod", name, {"app": name})
        self.outside = {ip: Endpoint(ip, ip) for ip in (INTERNET, METADATA, API_SERVER)}

    def add(self, name: str, ns: str, labels: dict) -> None:
        self.pods[name] = Endpoint(name, f"10.244.0.{next(self.ips)}", ns, labels)

    def policies(self) -> Policies:
        found = self.cluster.store.find("networkpolicies") + deploy_docs("network.yaml")
        return Policies(found, self.namespaces)

    def reach(self, src: str, dst: str, port: int, protocol: str = "TCP") -> bool:
        target = self.pods.get(dst) or self.outside[dst]
        source = self.pods.get(src) or self.outside[src]
        return self.policies().can_connect(source, target, port, protocol)


@pytest.fixture
def tenants(alice, bob, k8s_dc, cluster):
    """alice's ps job `fit` and collective job `other`, bob's job `fit`, all running."""
    start_ps_job(cluster, submit(alice, "fit"))
    launch(other := submit(alice, "other", mode="collective", pservers=0, trainers=1))
    cluster.run_job(ns_of(other), "other-trainer")
    start_ps_job(cluster, submit(bob, "fit"))
    return cluster


def pod(world: World, user: str, prefix: str) -> str:
    return next(key for key, ep in world.pods.items()
                if ep.namespace and ep.namespace.startswith(f"paddle-{user}-") and key.split("/")[1].startswith(prefix))


def test_a_jobs_pods_reach_each_other_and_nothing_of_anyone_else(tenants, k8s_dc):
    w = World(tenants, {"rogue": {}})  # a namespace with no policies of its own
    ps0, ps1, tr0 = pod(w, "alice", "fit-pserver-0"), pod(w, "alice", "fit-pserver-1"), pod(w, "alice", "fit-trainer-0")
    tr1 = pod(w, "alice", "fit-trainer-1")
    for src, dst, port in ((tr0, ps0, 7164), (tr1, ps1, 7164), (ps0, ps1, 7164), (tr1, tr0, 8500), (ps0, tr0, 8500)):
        assert w.reach(src, dst, port), (src, dst)
    other, bobs = pod(w, "alice", "other-trainer-0"), pod(w, "bob", "fit-pserver-0")
    for a, b in ((tr0, other), (ps0, bobs), (tr0, bobs)):
        assert not w.reach(a, b, 8500) and not w.reach(b, a, 7164), (a, b)
    # The control plane: its database and Redis are out of reach, and it does not reach in.
    for src in (ps0, tr0, other):
        assert not w.reach(src, "postgres", 5432) and not w.reach(src, "redis", 6379)
        assert not w.reach(src, "web", 8000) and not w.reach("web", src, 7164)
    assert w.reach("web", "postgres", 5432) and w.reach("worker", "redis", 6379), "the service still works"
    # deploy/'s own policy: even from a namespace whose egress is open, the stores are closed.
    assert w.reach("rogue-pod", "web", 8000) and w.reach("rogue-pod", INTERNET, 443)
    assert not w.reach("rogue-pod", "postgres", 5432) and not w.reach("rogue-pod", "redis", 6379)
    # DNS only to the cluster DNS; the internet by default (no runtime builds: pods pip install)
    # but never cluster-internal addresses or the cloud's metadata service.
    assert w.reach(tr0, "dns", 53, "UDP") and w.reach(tr0, "dns", 53) and not w.reach(tr0, "dns", 8080)
    assert w.reach(tr0, INTERNET, 443)
    assert not w.reach(tr0, METADATA, 80) and not w.reach(tr0, API_SERVER, 443)
    assert not w.reach(INTERNET, ps0, 7164), "no ingress from outside"


@pytest.mark.parametrize("internet, job_pods, build_pods", [("none", False, False), ("build", False, True),
                                                            ("all", True, True)])
def test_internet_egress_is_the_datacenters_setting(alice, k8s_dc, cluster, internet, job_pods, build_pods):
    k8s_dc.config = {**k8s_dc.config, "network": {"internet": internet}}
    k8s_dc.save()
    job = submit(alice, "fit", mode="collective", pservers=0, trainers=1)
    launch(job)
    ns = ns_of(job)
    cluster.run_job(ns, "fit-trainer")
    # The image build's pod, as kubernetes/build.py makes it (labels are what the policies select).
    cluster.store.create("pods", ns, {"metadata": {"name": "fit-build-x", "labels": manifests.labels(job, "build")},
                                      "spec": {}})
    w = World(cluster)
    trainer, build = pod(w, "alice", "fit-trainer-0"), pod(w, "alice", "fit-build-x")
    assert w.reach(trainer, INTERNET, 443) is job_pods
    assert w.reach(build, INTERNET, 443) is build_pods
    for src in (trainer, build):
        assert not w.reach(src, METADATA, 80) and not w.reach(src, "postgres", 5432)
        assert w.reach(src, "dns", 53, "UDP")


def test_a_private_or_in_cluster_registry_is_reachable_by_image_builds_only(alice, k8s_dc, cluster):
    """The build pushes to (and kaniko pulls base images from) the datacenter's registry, which
    may sit on a private network or in the cluster: the private ranges stay closed otherwise."""
    k8s_dc.config = {**k8s_dc.config, "network": {"internet": "none"}, "build": {
        "enabled": True, "registry": "10.20.0.5:5000/pc", "registry_cidrs": ["10.20.0.0/24"],
        "registry_namespace": "registry", "registry_pod_labels": {"app": "registry"}}}
    k8s_dc.save()
    job = submit(alice, "fit", mode="collective", pservers=0, trainers=1)
    launch(job)
    ns = ns_of(job)
    cluster.run_job(ns, "fit-trainer")
    cluster.store.create("pods", ns, {"metadata": {"name": "fit-build-x", "labels": manifests.labels(job, "build")},
                                      "spec": {}})
    w = World(cluster, {"registry": {}, "elsewhere": {}})
    w.outside.update({ip: Endpoint(ip, ip) for ip in ("10.20.0.5", "10.20.1.5")})
    trainer, build = pod(w, "alice", "fit-trainer-0"), pod(w, "alice", "fit-build-x")
    assert w.reach(build, "10.20.0.5", 5000) and w.reach(build, "registry-pod", 5000)
    assert not w.reach(build, "10.20.1.5", 5000) and not w.reach(build, "elsewhere-pod", 5000)
    assert not w.reach(build, METADATA, 80) and not w.reach(build, "postgres", 5432)
    assert not w.reach(build, INTERNET, 443), "internet: none"
    assert not w.reach(trainer, "10.20.0.5", 5000) and not w.reach(trainer, "registry-pod", 5000)


def test_cluster_egress_reaches_shared_services_but_not_the_control_plane_or_other_users(tenants, k8s_dc):
    """E.g. a package mirror in its own namespace, for datacenters without internet."""
    k8s_dc.config = {**k8s_dc.config, "network": {"internet": "none", "cluster_egress": True}}
    k8s_dc.save()
    # A new launch brings alice's namespace policies up to date with the settings.
    launch(submit(_user("alice"), "again", mode="collective", pservers=0, trainers=1))
    w = World(tenants, {"mirror": {}})
    tr0 = pod(w, "alice", "fit-trainer-0")
    assert w.reach(tr0, "mirror-pod", 3141)
    assert not w.reach(tr0, "postgres", 5432) and not w.reach(tr0, "redis", 6379)
    assert not w.reach(tr0, pod(w, "bob", "fit-pserver-0"), 7164)
    assert not w.reach(tr0, INTERNET, 443)


def _user(name: str):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username=name)


def test_the_namespace_policies_follow_the_datacenters_settings(alice, k8s_dc, cluster):
    launch(submit(alice, "fit", mode="collective", pservers=0, trainers=1))
    ns = ns_of(Job.objects.get(user=alice, name="fit"))
    before = cluster.store.get("networkpolicies", ns, "paddlecloud-isolation")
    assert before["spec"]["ingress"] == [] and len(before["spec"]["egress"]) == 2  # DNS, internet
    k8s_dc.config = {**k8s_dc.config, "network": {"internet": "none"}}
    k8s_dc.save()
    launch(submit(alice, "next", mode="collective", pservers=0, trainers=1))
    after = cluster.store.get("networkpolicies", ns, "paddlecloud-isolation")
    assert [r["ports"][0]["port"] for r in after["spec"]["egress"]] == [53]


def test_the_deploy_label_of_the_control_plane_is_the_default_setting():
    from jobs.backends.kubernetes.config import parse

    [ns_doc] = deploy_docs("namespace.yaml")
    key, value = parse("k8s", {}).network.control_plane
    assert ns_doc["metadata"]["labels"][key] == value
