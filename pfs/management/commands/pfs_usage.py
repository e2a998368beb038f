from django.core.management.base import BaseCommand

from pfs import uploads, usage


class Command(BaseCommand):
    help = "Recompute every home's storage usage by walking it, and remove abandoned uploads."

    def handle(self, *args, **options):
        removed = uploads.cleanup_stale()
        homes = usage.recompute_all()
        self.stdout.write(f"recomputed {homes} homes; removed {removed} abandoned uploads")
