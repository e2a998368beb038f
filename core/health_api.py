"""`GET /api/v2/health/`: whether each part of the service is up (core/health.py), for
operators, load balancers and probes. Anonymous, and says nothing secret: states, host names of
the worker and watcher processes, and an error's kind."""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from . import health

PARTS = ("web", "db", "redis", *health.ROLES)


class PartSerializer(serializers.Serializer):
    up = serializers.BooleanField()
    error = serializers.CharField(required=False, help_text="The kind of failure, when down")
    hosts = serializers.ListField(child=serializers.CharField(), required=False,
                                  help_text="Worker/watcher: the hosts whose process beat recently")


class HealthSerializer(serializers.Serializer):
    status = serializers.ChoiceField(["ok", "unavailable"])
    parts = serializers.DictField(child=PartSerializer(), help_text=f"One entry each: {', '.join(PARTS)}")


class HealthView(APIView):
    authentication_classes: list = []
    permission_classes = [AllowAny]
    throttle_classes: list = []

    @extend_schema(
        parameters=[OpenApiParameter(
            "only", OpenApiTypes.STR,
            description="Comma-separated parts that decide the status code (default: all), e.g. "
                        "`web` for a liveness probe, `web,db,redis` for readiness")],
        responses={200: HealthSerializer, 400: OpenApiTypes.OBJECT, 503: HealthSerializer},
    )
    def get(self, request):
        """Each part's state; 503 when one that counts is down."""
        only = [p for p in request.query_params.get("only", "").split(",") if p]
        unknown = sorted(set(only) - set(PARTS))
        if unknown:
            return Response({"only": [f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}"]},
                            status=status.HTTP_400_BAD_REQUEST)
        parts = health.status()
        ok = all(parts[p]["up"] for p in only or PARTS)
        return Response({"status": "ok" if ok else "unavailable", "parts": parts},
                        status=status.HTTP_200_OK if ok else status.HTTP_503_SERVICE_UNAVAILABLE)
