from rest_framework import serializers

from notifications import services
from notifications.models import SUBSCRIBABLE, Delivery, Webhook


class WebhookSerializer(serializers.ModelSerializer[Webhook]):
    # Every rule (schemes, addresses, events) lives in notifications.services, which reports all
    # errors at once, each with its reason.
    url = serializers.CharField(max_length=2000, allow_blank=True, help_text="http:// or https://, public address")
    events = serializers.ListField(child=serializers.CharField(max_length=40), max_length=len(SUBSCRIBABLE),
                                   help_text="any of " + ", ".join(SUBSCRIBABLE))
    secret = serializers.CharField(write_only=True, required=False, allow_blank=True, max_length=200,
                                   help_text="signs every message (HMAC-SHA256); made for you when empty on "
                                             "creation; a new one (PATCH) replaces the old at once")

    class Meta:
        model = Webhook
        fields = ["id", "url", "events", "secret", "active", "created"]
        read_only_fields = ["created"]


class NewWebhookSerializer(WebhookSerializer):
    """A new webhook: the one time its secret is shown."""

    secret = serializers.CharField(read_only=True)


class DeliverySerializer(serializers.ModelSerializer[Delivery]):
    job = serializers.SerializerMethodField(help_text="The name of the job it is about; empty for a test message.")

    class Meta:
        model = Delivery
        fields = ["id", "webhook", "event", "job", "status", "attempts", "status_code", "error", "response",
                  "created", "last_attempt"]

    def get_job(self, delivery: Delivery) -> str:
        return services.job_name(delivery)
