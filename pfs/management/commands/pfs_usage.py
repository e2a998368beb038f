from django.core.management.base import BaseCommand

from pfs import uploads, usage


class Command(BaseCommand):
    help = ("Recompute every home's storage usage by walking it, and remove abandoned uploads and the "
            "reservations of writes whose process died.")

    def handle(self, *args: str, **options: object) -> None:
        removed = uploads.cleanup_stale()
        dropped = usage.drop_stale_reservations()
        homes = usage.recompute_all()
        self.stdout.write(f"recomputed {homes} homes; removed {removed} abandoned uploads and {dropped} stale "
                          "reservations")
