"""Every manifest the kubernetes backend can emit, validated against the real Kubernetes OpenAPI
schemas (kubernetes-validate, strict: unknown fields fail), and the process contract they carry
checked against jobs/backends/contract.py for every replica index."""

import functools
import json
import re
import shlex

import kubernetes_validate
import kubernetes_validate.utils
import pytest

from accounts.models import Datacenter, Registry
from jobs.backends import contract
from jobs.backends.kubernetes import hardening as k8s_hardening
from jobs.backends.kubernetes import manifests
from jobs.backends.kubernetes import runtime as k8s_runtime
from jobs.backends.kubernetes.config import SettingsError, parse, sanitize, user_namespace
from jobs.backends.kubernetes.layouts import Plain, layout_for
from jobs.backends.kubernetes.workloads import PodOptions, pod_templates
from jobs.models import Job
from jobs.spec import MAX_TRAINERS

K8S_VERSION = "1.37"
# The schemas are re-read from disk on every validation; read each file once.
kubernetes_validate.utils.schema_contents = functools.lru_cache(maxsize=None)(kubernetes_validate.utils.schema_contents)
ROOT = {"metadata": {"name": "fit", "uid": "0b7d0c9e-3a51-4c2c-9a55-0e0f7d3c1a01"}}
STORAGES = [
    {"kind": "hostPath", "path": "/mnt/pfs"},
    {"kind": "pvc", "claim_name": "pfs", "sub_path": "paddlecloud"},
    {"kind": "cephfs", "monitors_addr": "10.0.0.1:6789,10.0.0.2:6789", "user": "admin", "secret_name": "ceph",
     "path": "/paddle", "mount_path": "/pfs"},
    {"kind": "nfs", "server": "nfs.example.com", "path": "/exports/pfs"},
]
VARIANTS = [
    {},
    {"node_selector": {"pool": "train"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
     "gpu_node_selector": {"accelerator": "nvidia"}, "priority_class_name": "batch", "cluster_domain": "cluster.local",
     "disk_limit": "20Gi"},
    {"gang_scheduler": "volcano", "volcano_queue": "research"},
    {"gang_scheduler": "kueue", "kueue_queue": "team-a"},
    {"build": {"enabled": True, "registry": "registry.example.com/pc", "push_secret": "push",
               "registry_cidrs": ["10.20.0.0/24", "fd00:20::/64"], "registry_namespace": "registry",
               "registry_pod_labels": {"app": "registry"}, "disk_limit": "50Gi"},
     "secrets_namespace": "paddlecloud", "network": {"cluster_egress": True}},
    {"run_as_user": 0, "network": {"internet": "none", "internet_except": [], "dns_pod_labels": {"app": "dns"}}},
]


def validate(obj: dict) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def make_job(user, *, mode="ps", pservers=2, trainers=3, gpu=0, registry=None, **extra) -> Job:
    dc = Datacenter.objects.get_or_create(name="k8s", defaults={"backend": "kubernetes"})[0]
    return Job.objects.create(user=user, datacenter=dc, name=extra.pop("name", "fit"), mode=mode, pservers=pservers,
                              trainers=trainers, gpu=gpu, registry=registry, cpu="2", memory="4Gi", pscpu="500m",
                              psmemory="1Gi", package=f"/pfs/k8s/home/{user.username}/jobs/fit",
                              entry="python train.py --out $(date +%s) --home $HOME", env={"NUM_PASS": "5$"},
                              **extra)


def every_manifest(job, settings, ns="paddle-alice-1234abcd"):
    """Every object of a job in the datacenter's layout but those of a gang scheduler's CRD
    (test_k8s_gang.py and test_k8s_jobset.py validate those against the vendored CRDs)."""
    owner = manifests.owner_reference(ROOT)
    opts = PodOptions(manifests.image_for(job, settings), False, ("fit-pull",), 10)
    yield manifests.namespace(settings, job.user.get_username())
    yield manifests.resource_quota(ns, cpu_millicores=8000, memory_bytes=32 * 2**30, gpus=2)
    yield manifests.root(job, ns)
    yield manifests.dockerconfig_secret("fit-pull", ns, {"r.example.com": manifests.docker_auth("u", "p")},
                                        manifests.labels(job), owner)
    yield manifests.copied_secret({"metadata": {"name": "ceph", "namespace": "paddlecloud", "uid": "x"},
                                   "type": "Opaque", "data": {"key": "c2VjcmV0"}}, ns)
    for obj in layout_for(settings).manifests(job, ns, owner, 0, opts):
        if obj["apiVersion"] in ("apps/v1", "batch/v1", "v1"):
            yield obj
    yield manifests.network_policy(job, ns, owner)
    yield from k8s_hardening.namespace_policies(settings, ns)
    for auth in (None, "fit-pull-build"):
        yield k8s_runtime.build_job(job, settings, ns, owner, destination="registry.example.com/pc/rt:abc",
                                  pull_auth=auth, push_auth=auth and "fit-push")


@pytest.mark.django_db
@pytest.mark.parametrize("storage", STORAGES, ids=[s["kind"] for s in STORAGES])
@pytest.mark.parametrize("variant", VARIANTS, ids=["plain", "scheduling", "volcano", "kueue", "build",
                                                    "root-closed"])
@pytest.mark.parametrize("shape", [dict(mode="ps"), dict(mode="collective", pservers=0, gpu=2)], ids=["ps", "gpu"])
def test_every_manifest_validates(alice, storage, variant, shape):
    settings = parse("k8s", {**variant, "storage": storage})
    job = make_job(alice, registry=Registry.objects.create(user=alice, name="r", server="r.example.com",
                                                           username="u", password="p"), **shape)
    for obj in every_manifest(job, settings):
        validate(obj)


@pytest.mark.django_db
@pytest.mark.parametrize("variant, job_disk, build_disk", [
    ({}, "10Gi", "10Gi"),  # the local backend's default disk_limit
    ({"disk_limit": "20Gi", "gang_scheduler": "kueue", "kueue_queue": "q"}, "20Gi", "20Gi"),
    ({"disk_limit": 2 << 30, "gang_scheduler": "volcano", "build": {"disk_limit": "50Gi"}}, "2147483648", "50Gi"),
], ids=["default", "kueue", "volcano-build"])
def test_every_container_requests_and_is_limited_to_the_disk_limit(alice, variant, job_disk, build_disk):
    """Requests = limits for ephemeral-storage on every container of every pod (the init
    containers too, so a pod's limit is the key's, not twice it): a pod writing more to its node's
    disk is evicted by its kubelet instead of filling the node other users' pods run on."""
    settings = parse("k8s", variant)
    assert settings.disk_limit == job_disk
    for shape in (dict(mode="ps"), dict(mode="collective", pservers=0, gpu=1)):
        job = make_job(alice, name=f"fit-{len(shape)}", **shape)
        objs = layout_for(settings).manifests(job, "ns", None, 0, PodOptions("img"))
        objs.append(k8s_runtime.build_job(job, settings, "ns", None, destination="r.example.com/rt:1",
                                          pull_auth=None, push_auth="push"))
        templates = [(o["kind"], t) for o in objs for t in pod_templates(o)]
        assert {k for k, _ in templates} >= {"Job", *(["StatefulSet"] if job.pservers and not settings.kueue_queue
                                                     else []), *(["JobSet"] if settings.kueue_queue else [])}
        for kind, t in templates:
            build = t["metadata"]["labels"][manifests.LABEL_ROLE] == "build"
            for c in t["spec"]["containers"] + t["spec"].get("initContainers", []):
                res = c["resources"]
                assert res["requests"] == res["limits"], (kind, c["name"])
                assert res["limits"]["ephemeral-storage"] == (build_disk if build else job_disk), (kind, c["name"])


@pytest.mark.django_db
def test_the_kubeflow_paddlejob_shape_is_refused_with_what_to_do():
    with pytest.raises(SettingsError, match="kubeflow: no longer supported.*remove the key"):
        parse("k8s", {"kubeflow": True})


def test_a_broken_manifest_is_caught():
    with pytest.raises(kubernetes_validate.ValidationError):
        validate({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"clusterIp": "None"}})


def expand(value: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion: defined vars are substituted, $$ is a literal $."""
    out, i = [], 0
    while i < len(value):
        if value.startswith("$$", i):
            out.append("$")
            i += 2
        elif value.startswith("$(", i) and (j := value.find(")", i)) != -1:
            name = value[i + 2:j]
            out.append(env.get(name, value[i:j + 1]))
            i = j + 1
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def pod_env(container: dict, pod_name: str, pod_labels: dict, pod_annotations: dict) -> dict[str, str]:
    env: dict[str, str] = {}
    for e in container["env"]:
        if "valueFrom" in e:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            if path == "metadata.name":
                env[e["name"]] = pod_name
            else:
                kind, key = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path).groups()
                env[e["name"]] = (pod_labels if kind == "labels" else pod_annotations)[key]
        else:
            env[e["name"]] = expand(e["value"], env)
    return env


@pytest.mark.django_db
@pytest.mark.parametrize("mode", ["ps", "collective"])
def test_each_pod_gets_exactly_the_process_contract(alice, mode):
    settings = parse("k8s", {})
    job = make_job(alice, mode=mode, pservers=2 if mode == "ps" else 0, trainers=3)
    ns = "paddle-alice-1234abcd"
    layout = Plain(settings, layout_for(settings).gang)
    topo = layout.topology(job, ns, 0)
    home = f"/pfs/k8s/home/{alice.username}"
    templates = {o["metadata"]["labels"][manifests.LABEL_ROLE]: o["spec"]
                 for o in layout.manifests(job, ns, None, 0, PodOptions("img", grace_seconds=5))
                 if o["kind"] in ("Job", "StatefulSet")}
    for role, count in (("pserver", job.pservers), ("trainer", job.trainers)):
        for i in range(count):
            container = templates[role]["template"]["spec"]["containers"][0]
            name = f"fit-{role}-{i}"
            got = pod_env(container, name, {}, {manifests.COMPLETION_INDEX: str(i)})
            want = contract.replica_env(job, role, i, topo, pfs_home=home, package=job.package)
            assert {k: got[k] for k in want} == want, (role, i)
            assert got["NUM_PASS"] == "5$"
            host = got["POD_IP"]
            assert host.startswith(f"{name}.") and f"{host}:{got['PADDLE_PORT']}" in got.get(
                "PADDLE_PSERVERS_IP_PORT_LIST" if role == "pserver" else "PADDLE_TRAINER_ENDPOINTS")
            args = [expand(a, {}) for a in container["args"]]
            assert args == shlex.split(job.entry)  # $(date ...) and $HOME reach the shell untouched
            assert expand(container["command"][2], {}) == manifests.RUN_SCRIPT


@pytest.mark.django_db
def test_pods_mount_the_home_public_and_the_package_snapshot(alice):
    settings = parse("k8s", {"storage": {"kind": "cephfs", "monitors_addr": "m:6789", "secret_name": "ceph",
                                         "path": "/paddle"}})
    job = make_job(alice, gpu=1, mode="collective", pservers=0)
    [trainers] = [o for o in layout_for(settings).manifests(job, "ns", None, 0, PodOptions(
        manifests.image_for(job, settings), grace_seconds=5)) if o["kind"] == "Job"]
    spec = trainers["spec"]["template"]["spec"]
    c = spec["containers"][0]
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/pfs/k8s/home/alice"]["subPath"] == "k8s/home/alice" and not mounts["/pfs/k8s/home/alice"].get(
        "readOnly")
    assert mounts["/pfs/k8s/public"]["readOnly"] and mounts[manifests.PACKAGE_MOUNT]["readOnly"]
    assert mounts["/trainer_id"]["subPath"] == "trainer_id"
    assert mounts[manifests.HOME] == {"name": "home", "mountPath": manifests.HOME}  # writable for a non-root uid
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["pfs"]["cephfs"] == {"monitors": ["m:6789"], "path": "/paddle", "user": "admin",
                                        "secretRef": {"name": "ceph"}}
    assert c["resources"]["limits"] == {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1", "ephemeral-storage": "10Gi"}
    assert c["image"] == settings.gpu_image and spec["automountServiceAccountToken"] is False


def test_namespaces_are_dns_safe_and_collision_proof():
    names = {user_namespace("paddle-", u) for u in ("a.b", "a-b", "A_B", "yanxu05@baidu.com", "x" * 200, "日本")}
    assert len(names) == 6
    for n in names:
        assert len(n) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", n), n
    assert sanitize("Yan.Xu@Baidu.com", 63) == "yan-xu-baidu-com"


@pytest.mark.parametrize("config, key", [
    ({"storage": {"kind": "s3"}}, "storage.kind"), ({"namespace_prefix": "Bad"}, "namespace_prefix"),
    ({"pending_timeout": -1}, "pending_timeout"), ({"storage": {"kind": "cephfs"}}, "monitors_addr"),
    ({"build": {"enabled": True}}, "build.registry"), ({"imagee": "x"}, "unknown keys"),
    ({"network": {"internet": "some"}}, "network.internet"), ({"network": {"internet_except": ["10.0.0.0"]}},
                                                              "network.internet_except"),
    ({"network": {"control_plane_label": "no-value"}}, "network.control_plane_label"),
    ({"network": {"firewall": True}}, "network: unknown keys"), ({"run_as_user": -1}, "run_as_user"),
    ({"build": {"registry_cidrs": ["10.20.0.5"]}}, "build.registry_cidrs"),
    ({"build": {"registry_pod_labels": {"app": "registry"}}}, "build.registry_pod_labels: only with"),
    ({"disk_limit": "lots"}, "disk_limit: a quantity"), ({"disk_limit": "512Ki"}, "disk_limit: a quantity"),
    ({"disk_limit": 10}, "disk_limit: a quantity"), ({"disk_limit": True}, "disk_limit: a quantity"),
    ({"build": {"disk_limit": "2Pi"}}, "build.disk_limit"),
])
def test_bad_settings_name_the_key(config, key):
    with pytest.raises(SettingsError, match=re.escape(key)):
        parse("k8s", config)


DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?")


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["my.job", "MyJob", "My.Job-2", "A" + "b.C" * 13])
@pytest.mark.parametrize("variant", VARIANTS[2:5], ids=["volcano", "kueue", "build"])
def test_names_with_dots_and_capitals_make_valid_kubernetes_objects(alice, name, variant):
    settings = parse("k8s", {**variant, "storage": STORAGES[0]})
    job = make_job(alice, name=name)
    assert job.k8s_name != name
    objs = list(every_manifest(job, settings))
    objs += layout_for(settings).manifests(job, "paddle-alice-1234abcd", manifests.owner_reference(ROOT), 0,
                                           PodOptions("img:1", True))
    for obj in objs:
        if obj["apiVersion"] in ("apps/v1", "batch/v1", "v1"):
            validate(obj)
        md = obj["metadata"]
        if md["name"].startswith(job.k8s_name):  # the job's own objects (not the namespace's)
            assert DNS_1035_LABEL.fullmatch(md["name"]), md["name"]
        for value in md.get("labels", {}).values():
            assert LABEL_VALUE.fullmatch(value), value
    # Names the cluster derives from ours stay DNS labels of 63 at most: a StatefulSet's
    # controller-revision-hash label (<name>-<10>), an Indexed Job's pod host names, a JobSet's.
    assert len(f"{manifests.pserver_name(job)}-{'h' * 10}") <= 63
    assert len(f"{manifests.trainer_name(job)}-{MAX_TRAINERS - 1}") <= 63
    assert len(f"{manifests.jobset_job_name(job, 'trainer')}-{MAX_TRAINERS - 1}") <= 63
    assert json.loads(manifests.root(job, "ns")["data"]["job.json"])["name"] == name  # as the user typed it
