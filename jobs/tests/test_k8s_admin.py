# ruff: noqa: F811 - pytest fixtures imported from k8s_fixtures are used as parameters
"""Operators configure a Kubernetes datacenter in the admin: the kubeconfig is write-only and
stored encrypted, a bad `config` is refused with the key named, and a gang scheduler the
cluster does not have (its API group absent) is refused when the datacenter is saved."""

import json

import pytest
from django.db import connection

from accounts.models import Datacenter
from jobs.admin import DatacenterForm

from .k8s_fixtures import cluster  # noqa: F401

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://10.0.0.1:6443"}}]
users: [{name: u, user: {token: secret-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.django_db
def test_kubeconfig_is_write_only_and_encrypted_at_rest():
    form = DatacenterForm(data={"name": "gpu", "backend": "kubernetes", "description": "",
                                "config": '{"namespace_prefix": "pc-", "pending_timeout": 300}',
                                "kubeconfig": KUBECONFIG, "default_max_restarts": 3})
    assert form.is_valid(), form.errors
    dc = form.save()
    with connection.cursor() as cur:
        cur.execute("SELECT kubeconfig FROM accounts_datacenter WHERE id = %s", [dc.pk])
        stored = cur.fetchone()[0]
    assert "secret-token" not in stored and Datacenter.objects.get(pk=dc.pk).kubeconfig == KUBECONFIG.strip()
    edit = DatacenterForm(instance=dc)
    assert "secret-token" not in str(edit["kubeconfig"])  # never sent back to a browser
    kept = DatacenterForm(instance=dc, data={"name": "gpu", "backend": "kubernetes", "config": "{}", "kubeconfig": "",
                                               "default_max_restarts": 3})
    assert kept.is_valid() and kept.save().kubeconfig == KUBECONFIG.strip()


@pytest.mark.django_db
@pytest.mark.parametrize("config, kubeconfig, field, text", [
    ('{"storage": {"kind": "s3"}}', "", "config", "storage.kind"),
    ("{}", "just: text", "kubeconfig", "no clusters"),
])
def test_bad_settings_are_refused(config, kubeconfig, field, text):
    form = DatacenterForm(data={"name": "k", "backend": "kubernetes", "config": config, "kubeconfig": kubeconfig})
    assert not form.is_valid() and text in str(form.errors[field])


def gang_form(cluster, config: dict) -> DatacenterForm:
    return DatacenterForm(data={"name": "k", "backend": "kubernetes", "config": json.dumps(config),
                                "kubeconfig": cluster.kubeconfig(), "default_max_restarts": 0})


KUEUE = {"gang_scheduler": "kueue", "kueue_queue": "team-a"}


@pytest.mark.django_db
@pytest.mark.parametrize("config, missing, named", [
    (KUEUE, "kueue.x-k8s.io", "Kueue"),
    (KUEUE, "jobset.x-k8s.io", "JobSet"),
    ({"gang_scheduler": "volcano"}, "scheduling.volcano.sh", "Volcano"),
])
def test_a_gang_scheduler_the_cluster_lacks_is_refused_when_the_datacenter_is_saved(cluster, config, missing, named):
    cluster.uninstall(missing)
    form = gang_form(cluster, config)
    assert not form.is_valid()
    assert named in str(form.errors["config"]) and missing in str(form.errors["config"]), form.errors


@pytest.mark.django_db
@pytest.mark.parametrize("config", [KUEUE, {"gang_scheduler": "volcano"}, {}], ids=["kueue", "volcano", "none"])
def test_a_gang_scheduler_the_cluster_has_is_accepted(cluster, config):
    form = gang_form(cluster, config)
    assert form.is_valid(), form.errors


@pytest.mark.django_db
def test_an_unreachable_cluster_is_refused_only_when_a_gang_scheduler_needs_checking():
    unreachable = KUBECONFIG.replace("https://10.0.0.1:6443", "https://127.0.0.1:9")
    base = {"name": "k", "backend": "kubernetes", "kubeconfig": unreachable, "default_max_restarts": 0}
    assert DatacenterForm(data={**base, "config": "{}"}).is_valid()
    form = DatacenterForm(data={**base, "config": json.dumps(KUEUE)})
    assert not form.is_valid() and "cannot reach the cluster" in str(form.errors["config"]), form.errors
