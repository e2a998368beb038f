from django.db.models import Prefetch
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.response import Response

from jobs import services
from jobs.filtersets import JobFilterSet
from jobs.models import Job, JobEvent
from paddleweb.api import OwnedViewSet, field_errors

from .serializers import JobCreateSerializer, JobDetailSerializer, JobSerializer, LogSerializer


class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OwnedViewSet):
    queryset = Job.objects.filter(deleting=False).select_related("datacenter", "registry")
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    filterset_class = JobFilterSet

    def get_queryset(self):
        qs = super().get_queryset()
        if self.action != "list":
            qs = qs.prefetch_related("replicas", Prefetch("events", JobEvent.objects.select_related("replica")))
        return qs

    def get_serializer_class(self):
        return JobSerializer if self.action == "list" else JobDetailSerializer

    @extend_schema(request=JobCreateSerializer, responses={201: JobDetailSerializer})
    def create(self, request):
        data = JobCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        with field_errors():
            job = services.submit_job(request.user, data.validated_data)
        return Response(JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None})
    def destroy(self, request, name=None):
        """Delete the job: kill it if running, then remove its history and logs."""
        services.delete_job(self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def kill(self, request, name=None):
        """Stop every replica (SIGTERM, then SIGKILL after a grace period); the job becomes Killed."""
        job = self.get_object()
        if not services.kill_job(job):
            raise serializers.ValidationError({"state": [f"the job has already ended ({job.state})"]})
        return Response(JobDetailSerializer(self.get_queryset().get(pk=job.pk)).data)

    @extend_schema(
        parameters=[
            OpenApiParameter("replica", OpenApiTypes.STR, description="e.g. trainer-0; all replicas when omitted"),
            OpenApiParameter("offset", OpenApiTypes.INT, description="Read on from this byte offset"),
            OpenApiParameter("lines", OpenApiTypes.INT, description="The last N lines (default 100)"),
        ],
        responses={200: LogSerializer(many=True)},
    )
    @action(detail=True, methods=["get"])
    def logs(self, request, name=None):
        job = self.get_object()
        replicas = list(job.replicas.all())
        wanted = request.query_params.get("replica")
        if wanted:
            replicas = [r for r in replicas if r.name == wanted]
            if not replicas:
                raise serializers.ValidationError({"replica": [f"job {job.name} has no replica '{wanted}'"]})
        try:
            offset = request.query_params.get("offset")
            offset = None if offset in (None, "") else int(offset)
            lines = int(request.query_params.get("lines") or 100)
        except ValueError:
            raise serializers.ValidationError({"offset": ["offset and lines must be whole numbers"]}) from None
        out = []
        for r in replicas:
            chunk = services.replica_log(r, offset=offset, lines=lines)
            out.append({"replica": r.name, "text": chunk.text, "offset": chunk.offset,
                        "next_offset": chunk.next_offset, "state": r.state})
        return Response(LogSerializer(out, many=True).data)
