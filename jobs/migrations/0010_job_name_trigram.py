"""The name filter (`?name=`, a case-insensitive substring: UPPER(name) LIKE UPPER('%text%')) reads a
trigram index on PostgreSQL instead of every job the user has. SQLite has no such index type: there
the filter scans the user's jobs, as before. pg_trgm is a trusted extension (PostgreSQL 13+): the
database's owner may create it."""

from django.db import migrations

INDEX = "job_name_upper_trgm"


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        schema_editor.execute(f'CREATE INDEX IF NOT EXISTS {INDEX} ON jobs_job USING gin (UPPER("name") gin_trgm_ops)')


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):
    dependencies = [("jobs", "0009_list_indexes")]

    operations = [migrations.RunPython(create, drop)]
