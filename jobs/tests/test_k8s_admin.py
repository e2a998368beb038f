"""Operators configure a Kubernetes datacenter in the admin: the kubeconfig is write-only and
stored encrypted, a bad `config` is refused with the key named."""

import pytest
from django.db import connection

from accounts.models import Datacenter
from jobs.admin import DatacenterForm

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
