"""`GET /api/v2/quota/`: a user's quota (quotas) beside what their admitted jobs hold (jobs)."""

from typing import Any

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.current import signed_in
from accounts.models import Datacenter
from quotas.services import effective_quota

from ..lifecycle.queue import held, queued


class ResourcesSerializer(serializers.Serializer[dict[str, Any]]):
    cpu_millicores = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    gpus = serializers.IntegerField()
    running_jobs = serializers.IntegerField()
    queued_jobs = serializers.IntegerField(help_text="Jobs waiting to start.")


class QuotaSerializer(serializers.Serializer[dict[str, Any]]):
    datacenter = serializers.CharField()
    limits = ResourcesSerializer()
    used = ResourcesSerializer()
    storage_bytes = serializers.IntegerField(help_text="Storage limit of your PFS home.")


class QuotaQuerySerializer(serializers.Serializer[Any]):  # a query: no instance
    datacenter = serializers.CharField(required=False, allow_blank=True, max_length=100,
                                       help_text="The default datacenter's when omitted or empty.")


@extend_schema(parameters=[QuotaQuerySerializer], responses={200: QuotaSerializer})
@api_view(["GET"])
def quota(request: Request) -> Response:
    """Your limits in a datacenter and what your running jobs use of them."""
    query = QuotaQuerySerializer(data=request.query_params)
    query.is_valid(raise_exception=True)
    name = query.validated_data.get("datacenter") or settings.DEFAULT_DATACENTER
    dc = Datacenter.objects.filter(name=name).first()
    if dc is None:
        raise serializers.ValidationError({"datacenter": [f"no datacenter named '{name}'"]})
    user = signed_in(request)
    q = effective_quota(user, dc)
    used, running = held(user, dc)
    waiting = queued(user, dc)
    return Response(QuotaSerializer({
        "datacenter": dc.name,
        "limits": {"cpu_millicores": q.cpu_millicores, "memory_bytes": q.memory_bytes, "gpus": q.gpus,
                   "running_jobs": q.max_running_jobs, "queued_jobs": q.max_queued_jobs},
        "used": {"cpu_millicores": used.cpu_millicores, "memory_bytes": used.memory_bytes, "gpus": used.gpus,
                 "running_jobs": running, "queued_jobs": waiting},
        "storage_bytes": q.storage_bytes,
    }).data)
