from django.contrib import admin
from django.http import HttpRequest

from core.admin_base import StrictLookupsAdmin

from .models import Delivery, EmailPreference, Webhook


@admin.register(Webhook)
class WebhookAdmin(StrictLookupsAdmin[Webhook]):
    list_display = ["id", "user", "url", "active", "created"]
    list_filter = ["active"]
    search_fields = ["user__username", "url"]
    # The secret is its owner's, shown to them once; the URL and events are checked by the owner's
    # services (notifications.services), so staff only turn a webhook off or on here.
    exclude = ["secret"]
    readonly_fields = ["user", "url", "events", "created"]


@admin.register(Delivery)
class DeliveryAdmin(StrictLookupsAdmin[Delivery]):
    list_display = ["id", "webhook", "event", "status", "attempts", "status_code", "last_attempt"]
    list_filter = ["status", "event"]
    readonly_fields = [f.name for f in Delivery._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(EmailPreference)
class EmailPreferenceAdmin(StrictLookupsAdmin[EmailPreference]):
    list_display = ["user", "job_end"]
