from django.conf import settings
from django.db import models


class JobState(models.TextChoices):
    QUEUED = "Queued"
    BUILDING = "Building"  # preparing the runtime environment from the package's requirements.txt
    STARTING = "Starting"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    KILLED = "Killed"


ACTIVE_STATES = (JobState.QUEUED, JobState.BUILDING, JobState.STARTING, JobState.RUNNING)
TERMINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.KILLED)


class ReplicaState(models.TextChoices):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    TERMINATED = "Terminated"  # stopped by us: job killed, finished, or failed elsewhere


REPLICA_DONE = (ReplicaState.SUCCEEDED, ReplicaState.FAILED, ReplicaState.TERMINATED)


class Job(models.Model):
    class Mode(models.TextChoices):
        PS = "ps", "Parameter servers + trainers"
        COLLECTIVE = "collective", "Collective trainers"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="jobs")
    datacenter = models.ForeignKey("accounts.Datacenter", on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=40)
    mode = models.CharField(max_length=12, choices=Mode.choices, default=Mode.PS)
    package = models.CharField(max_length=1024, help_text="PFS path of the training package directory.")
    entry = models.CharField(max_length=1024)
    pservers = models.PositiveIntegerField(default=0)
    trainers = models.PositiveIntegerField(default=1)
    cpu = models.CharField(max_length=20, default="1")
    memory = models.CharField(max_length=20, default="1Gi")
    gpu = models.PositiveIntegerField(default=0)
    pscpu = models.CharField(max_length=20, default="1")
    psmemory = models.CharField(max_length=20, default="1Gi")
    image = models.CharField(max_length=300, blank=True)
    registry = models.ForeignKey("accounts.Registry", on_delete=models.SET_NULL, null=True, blank=True)
    env = models.JSONField(default=dict, blank=True)
    passes = models.PositiveIntegerField(default=1)
    timeout = models.PositiveIntegerField(null=True, blank=True,
                                          help_text="Fail the job after this many seconds running.")

    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.QUEUED, db_index=True)
    reason = models.CharField(max_length=64, blank=True)
    message = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    # Refreshed by whoever is launching the job; a stale one lets reconcile take the launch over.
    heartbeat = models.DateTimeField(null=True, blank=True)
    # Set by delete: hidden from users while its processes and files are removed in the background.
    deleting = models.BooleanField(default=False)

    class Meta:
        ordering = ["-created"]
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="job_unique_name_per_user")]

    def __str__(self) -> str:
        return self.name

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
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["role", "index"]
        constraints = [models.UniqueConstraint(fields=["job", "role", "index"], name="replica_unique")]

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
        who = self.replica.name if self.replica_id else "job"
        return f"{who} {self.state}: {self.reason}"
