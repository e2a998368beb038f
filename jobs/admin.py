from django.contrib import admin, messages

from . import services
from .models import Job, JobEvent, Replica


class RecordAdmin(admin.ModelAdmin):
    """Replicas and events are written by the watcher: viewed, never added or edited by hand
    (deleting a job deletes them with it)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ReplicaInline(admin.TabularInline):
    model = Replica
    extra = 0
    can_delete = False
    fields = ["role", "index", "state", "exit_code", "host", "port", "pod", "restarts", "started", "finished", "reason"]
    readonly_fields = fields


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = ["created", "replica", "state", "reason", "message"]
    readonly_fields = fields


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "datacenter", "mode", "state", "reason", "pservers", "trainers", "created",
                    "finished"]
    list_filter = ["state", "mode", "datacenter", "deleting"]
    search_fields = ["name", "user__username", "package"]
    list_select_related = ["user", "datacenter"]
    date_hierarchy = "created"
    inlines = [ReplicaInline, JobEventInline]
    actions = ["kill_jobs"]
    readonly_fields = ["state", "reason", "message", "created", "started", "finished", "heartbeat", "deleting"]

    def has_add_permission(self, request):
        return False  # jobs are submitted through the service, which validates and launches them

    def has_change_permission(self, request, obj=None):
        # A finished job is history: it can be viewed (and deleted), not edited.
        return super().has_change_permission(request, obj) and not (obj is not None and not obj.is_active)

    @admin.action(description="Kill selected jobs")
    def kill_jobs(self, request, queryset):
        killed = sum(services.kill_job(job) for job in queryset)
        self.message_user(request, f"{killed} job(s) killed.", messages.SUCCESS)

    def delete_model(self, request, obj):
        services.delete_job(obj)

    def delete_queryset(self, request, queryset):
        for job in queryset:
            services.delete_job(job)


@admin.register(JobEvent)
class JobEventAdmin(RecordAdmin):
    list_display = ["created", "job", "replica", "state", "reason"]
    list_filter = ["state", "reason"]
    search_fields = ["job__name", "reason", "message"]
    list_select_related = ["job", "replica"]


@admin.register(Replica)
class ReplicaAdmin(RecordAdmin):
    list_display = ["__str__", "job", "role", "index", "state", "exit_code", "host", "port", "pod", "started",
                    "finished"]
    list_filter = ["state", "role"]
    search_fields = ["job__name", "pod", "host"]
    list_select_related = ["job"]
