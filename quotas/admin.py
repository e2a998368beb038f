from django.contrib import admin

from .models import Quota
from .units import format_bytes, format_cpu


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ["datacenter", "who", "cpu", "memory", "gpus", "max_running_jobs", "storage"]
    list_filter = ["datacenter"]
    search_fields = ["user__username"]
    list_select_related = ["datacenter", "user"]

    @admin.display(description="user")
    def who(self, obj):
        return obj.user or "(default)"

    @admin.display(description="CPU")
    def cpu(self, obj):
        return format_cpu(obj.cpu_millicores)

    @admin.display(description="memory")
    def memory(self, obj):
        return format_bytes(obj.memory_bytes)

    @admin.display(description="storage")
    def storage(self, obj):
        return format_bytes(obj.storage_bytes)
