"""Data migrations of pfs, run backwards and forwards on the test database."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("pfs", "0003_upload_sha256_later")]
AFTER = [("pfs", "0004_upload_digest_algorithm")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_uploads_made_before_crc32c_keep_their_sha256_check(alice, datacenter):
    """0004 renamed sha256/sha256_later to digest/digest_later: an upload in progress across the
    upgrade is still checked by the sha256 it was given or promised, and one without any check
    stays without."""
    old = _migrate(BEFORE).get_model("pfs", "UploadSession")
    try:
        given = old.objects.create(user_id=alice.pk, datacenter_id=datacenter.pk, path="/a", size=1, sha256="a" * 64)
        promised = old.objects.create(user_id=alice.pk, datacenter_id=datacenter.pk, path="/b", size=1,
                                      sha256_later=True)
        unchecked = old.objects.create(user_id=alice.pk, datacenter_id=datacenter.pk, path="/c", size=1)
    finally:
        new = _migrate(AFTER).get_model("pfs", "UploadSession")
    rows = {u.pk: (u.digest_algorithm, u.digest, u.digest_later) for u in new.objects.all()}
    assert rows == {given.pk: ("sha256", "a" * 64, False), promised.pk: ("sha256", "", True),
                    unchecked.pk: ("", "", False)}
