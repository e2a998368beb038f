"""The test process never opens the SQLite test database behind SQLite's back (conftest): doing so
once let a worker process delete the write-ahead log under the suite's connections."""

import os

import pytest
from django.db import connection


@pytest.mark.django_db
def test_opening_the_sqlite_test_database_outside_sqlite_is_refused():
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only")
    name = connection.settings_dict["NAME"]
    for path in (name, name + "-wal", os.path.relpath(name)):
        with pytest.raises(PermissionError, match="SQLite's alone"):
            open(path, "rb")  # noqa: SIM115 - refused, as it must be
    with pytest.raises(PermissionError):
        os.open(name, os.O_RDONLY)
    assert os.access(name, os.R_OK) and os.stat(name).st_size  # looking at it is fine
