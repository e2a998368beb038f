from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from accounts.current import AuthenticatedRequest
from core.api import OwnedViewSet, field_errors
from notifications import services, tasks
from notifications.models import Delivery, Webhook

from .serializers import DeliverySerializer, NewWebhookSerializer, WebhookSerializer


class WebhookViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin,
                     OwnedViewSet[Webhook]):
    """Your webhooks: URLs POSTed a signed JSON message when your jobs start or end. The secret
    that signs them is shown only when a webhook is made."""

    queryset = Webhook.objects.all()
    serializer_class = WebhookSerializer

    @extend_schema(responses={201: NewWebhookSerializer})
    def create(self, request: AuthenticatedRequest) -> Response:
        data = WebhookSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        with field_errors():
            hook = services.create_webhook(request.user, url=fields["url"], events=fields["events"],
                                           secret=fields.get("secret", ""))
        return Response(NewWebhookSerializer(hook).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        hook = self.get_object()
        data = WebhookSerializer(hook, data=request.data, partial=True)
        data.is_valid(raise_exception=True)
        fields = data.validated_data
        with field_errors():
            services.update_webhook(hook, url=fields.get("url"), events=fields.get("events"),
                                    active=fields.get("active"), secret=fields.get("secret"))
        return Response(WebhookSerializer(hook).data)

    def perform_destroy(self, instance: Webhook) -> None:
        services.delete_webhook(instance)

    @extend_schema(request=None, responses={202: DeliverySerializer})
    @action(detail=True, methods=["post"], serializer_class=DeliverySerializer)
    def test(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        """Send the webhook a signed test message (event webhook.test, no job); follow it in its deliveries."""
        delivery = services.send_test(self.get_object())
        tasks.queue(delivery)
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={202: DeliverySerializer})
    @action(detail=True, methods=["post"], serializer_class=DeliverySerializer,
            url_path=r"deliveries/(?P<delivery_id>[0-9]+)/redeliver")
    def redeliver(self, request: AuthenticatedRequest, pk: str | None = None, *, delivery_id: str) -> Response:
        """Send one of the webhook's messages again, as a new delivery (the old one stays in the log)."""
        found = services.deliveries_of(request.user, self.get_object()).filter(pk=delivery_id).first()
        if found is None:
            raise NotFound()
        again = services.redeliver(found)
        tasks.queue(again)
        return Response(DeliverySerializer(again).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(responses={200: DeliverySerializer(many=True)})
    @action(detail=True, serializer_class=DeliverySerializer)
    def deliveries(self, request: AuthenticatedRequest, pk: str | None = None) -> Response:
        """The webhook's messages, newest first: each one's status, attempts and last answer."""
        # The viewset's model is Webhook; DRF's stubs allow pages of that model only.
        page: list[Delivery] | None = self.paginate_queryset(
            services.deliveries_of(request.user, self.get_object()))  # type: ignore[arg-type]
        return self.get_paginated_response(DeliverySerializer(page, many=True).data)
