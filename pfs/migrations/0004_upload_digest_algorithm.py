from django.db import migrations, models


def sha256_where_checked(apps, schema_editor):
    """Every upload checked before this migration was checked by sha256."""
    UploadSession = apps.get_model("pfs", "UploadSession")
    UploadSession.objects.exclude(digest="", digest_later=False).update(digest_algorithm="sha256")


class Migration(migrations.Migration):

    dependencies = [
        ('pfs', '0003_upload_sha256_later'),
    ]

    operations = [
        migrations.RenameField(model_name='uploadsession', old_name='sha256', new_name='digest'),
        migrations.RenameField(model_name='uploadsession', old_name='sha256_later', new_name='digest_later'),
        migrations.AlterField(
            model_name='uploadsession',
            name='digest_later',
            field=models.BooleanField(default=False, help_text='The digest comes with a chunk (Upload-Sha256 or Upload-Crc32c); the upload is not put in place without it.'),
        ),
        migrations.AddField(
            model_name='uploadsession',
            name='digest_algorithm',
            field=models.CharField(blank=True, choices=[('sha256', 'sha256'), ('crc32c', 'crc32c')], help_text='How the whole file is checked (blank: only its size).', max_length=8),
        ),
        migrations.RunPython(sha256_where_checked, migrations.RunPython.noop),
    ]
