"""Re-encrypt every stored secret with the first of FIELD_ENCRYPTION_KEYS (see
docs/operating/configuration.md, "Rotating the encryption key")."""

from django.core.management.base import BaseCommand

from accounts.fields import rotate_encrypted_fields


class Command(BaseCommand):
    help = ("Re-encrypt every stored secret (registry passwords, kubeconfigs) with the first key of "
            "FIELD_ENCRYPTION_KEYS; afterwards the other keys can be dropped.")

    def handle(self, *args: str, **options: object) -> None:
        self.stdout.write(f"re-encrypted {rotate_encrypted_fields()} stored secrets with the first key")
