"""`GET /api/v2/health/`: whether the service is up (core/health.py), for load balancers, probes
and operators. Anyone may ask, and gets only the verdict (`ok` or `unavailable`, 200 or 503);
staff get each part's state too: the host names of the worker and watcher processes and an
error's kind are for them, not for the internet."""

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from . import health

PARTS = ("web", "db", "redis", *health.ROLES)


class PartSerializer(serializers.Serializer[dict[str, Any]]):
    up = serializers.BooleanField()
    error = serializers.CharField(required=False, help_text="The kind of failure, when down")
    hosts = serializers.ListField(child=serializers.CharField(), required=False,
                                  help_text="Worker/watcher: the hosts whose process beat recently")


class HealthSerializer(serializers.Serializer[dict[str, Any]]):
    status = serializers.ChoiceField(["ok", "unavailable"])
    parts = serializers.DictField(child=PartSerializer(), required=False,
                                  help_text=f"Staff only: one entry each, {', '.join(PARTS)}")


class HealthView(APIView):
    permission_classes = [AllowAny]  # credentials, when sent, only add the parts for staff
    throttle_classes = []

    @extend_schema(
        parameters=[OpenApiParameter(
            "only", OpenApiTypes.STR,
            description="Comma-separated parts that decide the status code (default: all), e.g. "
                        "`web` for a liveness probe, `web,db,redis` for readiness")],
        responses={200: HealthSerializer, 400: OpenApiTypes.OBJECT, 503: HealthSerializer},
    )
    def get(self, request: Request) -> Response:
        """Whether the service is up; 503 when a part that counts is down. Staff also get each part."""
        only = [p for p in request.query_params.get("only", "").split(",") if p]
        unknown = sorted(set(only) - set(PARTS))
        if unknown:
            return Response({"only": [f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}"]},
                            status=status.HTTP_400_BAD_REQUEST)
        parts = health.status()
        ok = all(parts[p]["up"] for p in only or PARTS)
        body: dict[str, Any] = {"status": "ok" if ok else "unavailable"}
        if request.user.is_staff:
            body["parts"] = parts
        return Response(body, status=status.HTTP_200_OK if ok else status.HTTP_503_SERVICE_UNAVAILABLE)
