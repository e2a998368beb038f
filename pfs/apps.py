from django.apps import AppConfig
from django.db.models.signals import post_save


class PfsConfig(AppConfig):
    name = "pfs"
    verbose_name = "PFS storage"

    def ready(self):
        from .signals import job_event_saved

        post_save.connect(job_event_saved, sender="jobs.JobEvent", dispatch_uid="pfs-usage-on-job-end")
