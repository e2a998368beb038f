from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from . import spec


class JobState(models.TextChoices):
    QUEUED = "Queued"
    BUILDING = "Building"  # preparing the runtime environment from the package's requirements.txt
    STARTING = "Starting"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    KILLED = "Killed"
    SUSPENDED = "Suspended"  # stopped by its user, resources freed; resume queues it again


# Not ended: the job may still change, and kill applies.
ACTIVE_STATES = (JobState.QUEUED, JobState.BUILDING, JobState.STARTING, JobState.RUNNING, JobState.SUSPENDED)
# Admitted: holding its share of the user's quota and the datacenter's capacity.
ADMITTED_STATES = (JobState.BUILDING, JobState.STARTING, JobState.RUNNING)
TERMINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED)


class ReplicaState(models.TextChoices):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    TERMINATED = "Terminated"  # stopped by us: job killed, finished, or failed elsewhere


REPLICA_DONE = (ReplicaState.SUCCEEDED, ReplicaState.FAILED, ReplicaState.TERMINATED)


K8S_NAME_HELP = ("The name of the job's objects on Kubernetes (and its replicas' host names): the name, or "
                 "when that is not a lowercase DNS label, lowercase with '.' as '-' and a hash of the name.")


class Job(models.Model):
    class Mode(models.TextChoices):
        PS = "ps", dict(spec.MODES)["ps"]
        COLLECTIVE = "collective", dict(spec.MODES)["collective"]

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jobs")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.PROTECT, related_name="jobs")
    # The job spec's fields: options, defaults and help texts all come from jobs.spec.
    name = spec.model_field("name")
    mode = spec.model_field("mode")
    package = spec.model_field("package")
    entry = spec.model_field("entry")
    pservers = spec.model_field("pservers")
    trainers = spec.model_field("trainers")
    cpu = spec.model_field("cpu")
    memory = spec.model_field("memory")
    gpu = spec.model_field("gpu")
    pscpu = spec.model_field("pscpu")
    psmemory = spec.model_field("psmemory")
    image = spec.model_field("image")
    registry = models.ForeignKey("accounts.Registry", on_delete=models.SET_NULL, null=True, blank=True)
    env = spec.model_field("env")
    passes = spec.model_field("passes")
    timeout = spec.model_field("timeout")
    priority = spec.model_field("priority")
    fail_fast = spec.model_field("fail_fast")
    max_restarts = spec.model_field("max_restarts")
    restart_mode = spec.model_field("restart_mode")
    permanent_exit_codes = spec.model_field("permanent_exit_codes")
    k8s_name = models.CharField(max_length=spec.NAME_MAX, editable=False, default="",
                                help_text=K8S_NAME_HELP)

    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.QUEUED, db_index=True)
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    # When it last entered the queue (submitted, resumed): first in, first out within a user.
    queued_at = models.DateTimeField(null=True, blank=True)
    # Place in its datacenter's queue (1: next), kept by each admission pass (jobs/lifecycle/queue.py).
    queue_position = models.PositiveIntegerField(null=True, blank=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    restarts = models.PositiveIntegerField(default=0, help_text="Restarts of the whole job (gang restarts).")
    cloned_from = models.ForeignKey("self", on_delete=models.SET_NULL, null=True, blank=True, related_name="clones",
                                    help_text="The job this one was submitted again from.")
    # Refreshed by whoever is launching the job; a stale one lets reconcile take the launch over.
    heartbeat = models.DateTimeField(null=True, blank=True)
    # Set by delete: hidden from users while its processes and files are removed in the background.
    deleting = models.BooleanField(default=False)
    # When the retention policy (JOB_RETENTION_DAYS) removed its working copies and logs; the row,
    # replicas and events stay.
    purged = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created"]
        # A user's list, newest first, in the order of its cursor (core.pagination), and the same
        # order within each filter that can pick a few jobs out of a long history: a page is one
        # index range scan at 100,000 jobs as at 100 (bench/job_list.py; the plans are checked by
        # jobs/tests/test_list_queries.py). The name filter's trigram index is PostgreSQL's only
        # (migration 0009).
        indexes = [
            models.Index(fields=["user", "-created", "-id"], name="job_user_newest_first"),
            models.Index(fields=["user", "state", "-created", "-id"], name="job_user_state_newest_first"),
            models.Index(fields=["user", "-created", "-id"], condition=models.Q(state__in=ACTIVE_STATES),
                         name="job_user_active_newest_first"),
            models.Index(fields=["user", "datacenter", "-created", "-id"], name="job_user_dc_newest_first"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["user", "name"], name="job_unique_name_per_user"),
            models.UniqueConstraint(fields=["user", "k8s_name"], name="job_unique_k8s_name_per_user"),
            *spec.check_constraints("job"),
        ]

    def __str__(self) -> str:
        return str(self.name)  # a spec field: typed as any model field

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Set once: the cluster's objects keep their names even if an admin renames the job.
        if not self.k8s_name:
            self.k8s_name = spec.k8s_name(self.name)
        super().save(*args, **kwargs)

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES


class Replica(models.Model):
    class Role(models.TextChoices):
        PSERVER = "pserver"
        TRAINER = "trainer"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="replicas")
    role = models.CharField(max_length=10, choices=Role.choices)
    index = models.PositiveIntegerField()
    state = models.CharField(max_length=12, choices=ReplicaState.choices, default=ReplicaState.PENDING)
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    host = models.CharField(max_length=253, blank=True)
    port = models.PositiveIntegerField(null=True, blank=True)
    pod = models.CharField(max_length=253, blank=True, help_text="Pod name, or the process id locally.")
    exit_code = models.IntegerField(null=True, blank=True)
    restarts = models.PositiveIntegerField(default=0)
    # Every start of the replica (the first, a restart, a resume) is a new attempt; what a backend
    # observes of an earlier attempt never changes the replica.
    attempt = models.PositiveIntegerField(default=0)
    # A failed replica waiting out its backoff is started again at this time.
    restart_at = models.DateTimeField(null=True, blank=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["role", "index"]
        constraints = [models.UniqueConstraint(fields=["job", "role", "index"], name="replica_unique")]
        # The replicas that may still change, by job (jobs.tasks.jobs_to_watch, twice a watcher
        # pass): a few, however many replicas ever ran.
        indexes = [models.Index(fields=["job"], name="replica_unsettled",
                                condition=Q(state__in=[ReplicaState.RUNNING, ReplicaState.PENDING]))]

    def __str__(self) -> str:
        return self.name

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}" if self.port else ""


class JobEvent(models.Model):
    """Every transition of a job or replica, with why: "why is it pending" always has an answer."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    replica = models.ForeignKey(Replica, on_delete=models.CASCADE, null=True, blank=True, related_name="events")
    created = models.DateTimeField(auto_now_add=True, db_index=True)
    state = models.CharField(max_length=12)
    reason = models.CharField(max_length=64)
    message = models.TextField(blank=True)

    class Meta:
        ordering = ["created", "id"]

    def __str__(self) -> str:
        who = self.replica.name if self.replica is not None else "job"  # no query when there is none
        return f"{who} {self.state}: {self.reason}"


class ReplicaSample(models.Model):
    """A replica's CPU and memory at one moment (jobs/live/usage.py): at most USAGE_SAMPLES_KEPT per
    replica, the oldest dropped first; kept after the job ends, deleted with it."""

    replica = models.ForeignKey(Replica, on_delete=models.CASCADE, related_name="samples")
    taken = models.DateTimeField()
    cpu_percent = models.FloatField(null=True, blank=True, help_text="100 = one core busy; null: not known yet.")
    cpu_seconds = models.FloatField(null=True, blank=True, help_text="Cumulative CPU time, where measured so.")
    memory_bytes = models.BigIntegerField()

    class Meta:
        ordering = ["replica", "taken"]
        indexes = [models.Index(fields=["replica", "taken"], name="replica_sample_taken")]

    def __str__(self) -> str:
        return f"{self.replica} at {self.taken}"
