from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from .fields import EncryptedTextField

dns_label = RegexValidator(
    r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$",
    "Use 1-40 lowercase letters, digits and '-', starting with a letter and ending with a letter or digit.",
)


class Datacenter(models.Model):
    class Backend(models.TextChoices):
        LOCAL = "local", "Local processes"
        KUBERNETES = "kubernetes", "Kubernetes"

    name = models.CharField(max_length=40, unique=True, validators=[dns_label])
    backend = models.CharField(max_length=20, choices=Backend.choices, default=Backend.LOCAL)
    description = models.CharField(max_length=200, blank=True)
    # Backend settings (e.g. Kubernetes namespace prefix, images); shape owned by the backend
    # (jobs/backends/kubernetes/config.py documents the Kubernetes keys).
    config = models.JSONField(default=dict, blank=True)
    # A kubeconfig for the kubernetes backend (it holds cluster credentials, so it is encrypted
    # at rest); empty means the in-cluster service account of the pod the service runs in.
    kubeconfig = EncryptedTextField(blank=True, default="",
                                    help_text="Kubernetes only: a kubeconfig (YAML); empty uses the in-cluster "
                                              "service account. Stored encrypted; never shown again.")
    # What the queue admits jobs against; empty: the machine's own (local) or no limit (Kubernetes,
    # whose scheduler has the last word).
    capacity_cpu_millicores = models.PositiveBigIntegerField(null=True, blank=True,
                                                             help_text="CPU jobs may use together, in millicores.")
    capacity_memory_bytes = models.PositiveBigIntegerField(null=True, blank=True,
                                                           help_text="Memory jobs may use together, in bytes.")
    capacity_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="GPUs jobs may use together.")
    default_max_restarts = models.PositiveIntegerField(default=3,
                                                       help_text="Restarts a job gets when it asks for none.")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Registry(models.Model):
    """A user's private docker registry credentials, used to pull job images."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="registries")
    name = models.CharField(max_length=40, validators=[dns_label])
    server = models.CharField(max_length=253, help_text="Registry host, e.g. registry.example.com:5000")
    username = models.CharField(max_length=200)
    password = EncryptedTextField(help_text="Stored encrypted; never shown again.")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "registries"
        constraints = [models.UniqueConstraint(fields=["user", "name"], name="registry_unique_name_per_user")]

    def __str__(self) -> str:
        return f"{self.user}/{self.name}"


class ApiToken(models.Model):
    """What a user sees of one of their API tokens (knox keeps only the token's hash): a name,
    usually the device it was issued to. A named device holds at most one token, so logging in
    again from it replaces its token instead of adding one."""

    auth_token = models.OneToOneField(settings.KNOX_TOKEN_MODEL, on_delete=models.CASCADE, related_name="info")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=64, blank=True)
    last_used = models.DateTimeField(null=True, blank=True, editable=False,
                                     help_text="When a request last came with it (to within a minute).")

    class Meta:
        ordering = ["-id"]
        constraints = [models.UniqueConstraint(fields=["user", "name"], condition=~models.Q(name=""),
                                               name="api_token_one_per_named_device")]

    def __str__(self) -> str:
        return f"{self.user}/{self.name or self.pk}"


class LoginGate(models.Model):
    """When the next password check for `username` may start (accounts/login_gate.py): one time for
    addresses with a clean record and one for the others. The row is also what a check locks."""

    username = models.CharField(max_length=150, unique=True)
    clean_opens = models.DateTimeField(null=True)
    other_opens = models.DateTimeField(null=True)

    def __str__(self) -> str:
        return self.username


class FailedLogin(models.Model):
    """A password check that has not succeeded: written when the gate lets the check start (so
    checks still hashing count), deleted if the password was right."""

    username = models.CharField(max_length=150)
    address = models.GenericIPAddressField(null=True)
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["username", "at"]), models.Index(fields=["address", "at"])]

    def __str__(self) -> str:
        return f"{self.username} from {self.address} at {self.at}"
