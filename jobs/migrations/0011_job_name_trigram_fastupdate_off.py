"""The name's trigram index (0010) without GIN's pending list: with it, new jobs' names wait in an
unsorted list (up to gin_pending_list_limit, 4 MB) that every name search reads through until
VACUUM merges it; at 100,000 jobs just created that made `?name=` several times slower. Jobs are
created a few at a time, so each insert may as well update the index itself."""

from django.db import migrations

INDEX = "job_name_upper_trgm"


def fastupdate_off(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER INDEX {INDEX} SET (fastupdate = off)")
        schema_editor.execute(f"SELECT gin_clean_pending_list('{INDEX}'::regclass)")


def fastupdate_on(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER INDEX {INDEX} RESET (fastupdate)")


class Migration(migrations.Migration):
    dependencies = [("jobs", "0010_job_name_trigram")]

    operations = [migrations.RunPython(fastupdate_off, fastupdate_on)]
