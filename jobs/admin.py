from __future__ import annotations

from typing import Any, TypeVar

from django import forms
from django.contrib import admin, messages
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from accounts.models import Datacenter
from core.admin_base import StrictLookupsAdmin
from quotas.units import format_bytes, format_cpu

from . import services, user_admin  # noqa: F401  (user_admin registers users and groups)
from .backends.base import LaunchError
from .backends.registry import backend_class, capacity, get_backend
from .models import Job, JobEvent, Replica

_Record = TypeVar("_Record", bound=Model)


class RecordAdmin(StrictLookupsAdmin[_Record]):
    """Replicas and events are written by the watcher: viewed, never added or edited by hand
    (deleting a job deletes them with it)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: _Record | None = None) -> bool:
        return False


class ReplicaInline(admin.TabularInline[Replica, Job]):
    model = Replica
    extra = 0
    can_delete = False
    fields = ("role", "index", "state", "exit_code", "host", "port", "pod", "restarts", "started", "finished", "reason")
    readonly_fields = fields


class JobEventInline(admin.TabularInline[JobEvent, Job]):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = ("created", "replica", "state", "reason", "message")
    readonly_fields = fields


@admin.register(Job)
class JobAdmin(StrictLookupsAdmin[Job]):
    list_display = ["name", "user", "datacenter", "mode", "state", "reason", "pservers", "trainers", "created",
                    "finished"]
    list_filter = ["state", "mode", "datacenter", "deleting"]
    search_fields = ["name", "user__username", "package"]
    list_select_related = ["user", "datacenter"]
    date_hierarchy = "created"
    inlines = [ReplicaInline, JobEventInline]
    actions = ["kill_jobs"]

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> list[str]:
        # Viewed, never edited: no service changes a job in place, and a form would skip every check
        # submission makes (owner, another user's registry, quota, name); act through the actions.
        return [f.name for f in Job._meta.fields if f.name != "id"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are submitted through the service, which validates and launches them

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # A finished job is history: it can be viewed (and deleted), not edited.
        return super().has_change_permission(request, obj) and not (obj is not None and not obj.is_active)

    @admin.action(description="Kill selected jobs")
    def kill_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        me = request.user.get_username()
        killed = sum(services.kill_job(job, by=me if job.user_id != request.user.pk else "") for job in queryset)
        self.message_user(request, f"{killed} job(s) killed.", messages.SUCCESS)

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        services.delete_job(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        for job in queryset:
            services.delete_job(job)


@admin.register(JobEvent)
class JobEventAdmin(RecordAdmin[JobEvent]):
    list_display = ["created", "job", "replica", "state", "reason"]
    list_filter = ["state", "reason"]
    search_fields = ["job__name", "reason", "message"]
    list_select_related = ["job", "replica"]


@admin.register(Replica)
class ReplicaAdmin(RecordAdmin[Replica]):
    list_display = ["__str__", "job", "role", "index", "state", "exit_code", "host", "port", "pod", "started",
                    "finished"]
    list_filter = ["state", "role"]
    search_fields = ["job__name", "pod", "host"]
    list_select_related = ["job"]


# accounts' Datacenter, administered here: what the admin shows and checks of one is its backend's.
class DatacenterForm(forms.ModelForm[Datacenter]):
    kubeconfig = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "placeholder": "(unchanged)"}), required=False,
        help_text="Kubernetes only: paste a kubeconfig (YAML) to replace the stored one; leave empty to keep it. "
                  "Never shown again. With none stored, the service account of the pod the service runs in is used.")
    clear_kubeconfig = forms.BooleanField(required=False, help_text="Forget the stored kubeconfig (use in-cluster).")

    class Meta:
        model = Datacenter
        fields = ["name", "backend", "description", "config", "kubeconfig", "capacity_cpu_millicores",
                  "capacity_memory_bytes", "capacity_gpus", "default_max_restarts"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial["kubeconfig"] = ""  # write-only: the stored one is never sent to a browser

    def clean_config(self) -> dict[str, Any]:
        value = self.cleaned_data.get("config")
        if not isinstance(value, dict):  # null, a list, a string: no backend reads those
            raise forms.ValidationError("the config is a JSON object, {} for none")
        return value

    def clean_kubeconfig(self) -> str:
        value: str = self.cleaned_data["kubeconfig"].strip()
        if not value:
            return "" if self.data.get("clear_kubeconfig") else (self.instance.kubeconfig if self.instance.pk else "")
        import yaml

        try:
            data = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise forms.ValidationError(f"not YAML: {e}") from e
        if not isinstance(data, dict) or not data.get("clusters"):
            raise forms.ValidationError("not a kubeconfig: it has no clusters")
        return value

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        assert cleaned is not None  # ModelForm.clean returns cleaned_data
        backend = cleaned.get("backend")
        if backend:
            cls = backend_class(backend)
            try:
                cls.check_config(cleaned.get("name") or "", cleaned.get("config") or {})
                if "kubeconfig" in cleaned:  # what the cluster must have installed for these settings
                    cls.check_cluster(cleaned.get("name") or "", cleaned.get("config") or {}, cleaned["kubeconfig"])
            except ValueError as e:
                self.add_error("config", str(e))
        return cleaned


@admin.register(Datacenter)
class DatacenterAdmin(StrictLookupsAdmin[Datacenter]):
    form = DatacenterForm
    list_display = ["name", "backend", "description", "created"]
    list_filter = ["backend"]
    search_fields = ["name", "description"]
    readonly_fields = ["isolation", "queue_capacity"]

    @admin.display(description="Isolation of jobs")
    def isolation(self, obj: Datacenter | None) -> SafeString | str:
        if obj is None or obj.pk is None:
            return "-"
        try:
            lines = get_backend(obj).isolation()
        except LaunchError as e:
            lines = [e.message]
        return format_html_join("", "<div>{}</div>", ((line,) for line in lines)) if lines else "-"

    @admin.display(description="Capacity the queue admits against")
    def queue_capacity(self, obj: Datacenter | None) -> str:
        if obj is None or obj.pk is None:
            return "-"
        cap = capacity(obj)
        parts = [f"{format_cpu(cap.cpu_millicores)} CPU" if cap.cpu_millicores is not None else "CPU: no limit",
                 f"{format_bytes(cap.memory_bytes)} memory" if cap.memory_bytes is not None else "memory: no limit",
                 f"{cap.gpus} GPU" if cap.gpus is not None else "GPU: no limit"]
        return ", ".join(parts) + " (empty fields: the machine's own locally, no limit on Kubernetes)"
