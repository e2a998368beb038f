"""`GET /api/v2/cluster/`: every datacenter's capacity, what its admitted jobs hold, its running
jobs and its queue in order (jobs/cluster.py). Another user's job is its owner and resources only."""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from accounts.current import signed_in

from .. import cluster


class AmountsSerializer(serializers.Serializer[dict[str, Any]]):
    cpu_millicores = serializers.IntegerField(allow_null=True)
    memory_bytes = serializers.IntegerField(allow_null=True)
    gpus = serializers.IntegerField(allow_null=True)


class ClusterJobSerializer(serializers.Serializer[dict[str, Any]]):
    owner = serializers.CharField()
    mine = serializers.BooleanField()
    name = serializers.CharField(allow_null=True, help_text="null for another user's job (staff see every name).")
    state = serializers.CharField()
    reason = serializers.CharField(allow_null=True, help_text="Why it waits or how it runs; null as name is.")
    message = serializers.CharField(allow_null=True)
    queue_position = serializers.IntegerField(allow_null=True, help_text="A queued job's place (1: next).")
    since = serializers.DateTimeField(allow_null=True, help_text="When it was queued (queue) or started (running).")
    trainers = serializers.IntegerField()
    pservers = serializers.IntegerField()
    resources = AmountsSerializer()


class DatacenterViewSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField()
    backend = serializers.CharField()
    capacity = AmountsSerializer(help_text="What its jobs may hold together; null: no limit (the cluster decides).")
    used = AmountsSerializer(help_text="What its admitted (building, starting, running) jobs hold.")
    running = ClusterJobSerializer(many=True)
    queue = ClusterJobSerializer(many=True, help_text="In the order the queue admits them.")


def _job(job: cluster.ClusterJob) -> dict[str, Any]:
    hidden = not job.shown
    return {"owner": job.owner, "mine": job.mine, "name": None if hidden else job.name, "state": job.state,
            "reason": None if hidden else job.reason, "message": None if hidden else job.message,
            "queue_position": job.queue_position, "since": job.since, "trainers": job.trainers,
            "pservers": job.pservers, "resources": vars(job.resources)}


@extend_schema(responses={200: DatacenterViewSerializer(many=True)})
@api_view(["GET"])
def cluster_view(request: Request) -> Response:
    """Every datacenter: capacity and use, the running jobs and the queue in order with each job's reason."""
    return Response(DatacenterViewSerializer([
        {"name": dc.name, "backend": dc.backend, "capacity": vars(dc.capacity), "used": vars(dc.used),
         "running": [_job(j) for j in dc.running], "queue": [_job(j) for j in dc.queue]}
        for dc in cluster.overview(signed_in(request))], many=True).data)  # type: ignore[arg-type]  # many=True
