from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from accounts.current import AuthenticatedRequest
from accounts.models import Datacenter, Registry
from core.api import OwnedViewSet, field_errors
from core.pagination import PAGE_SIZE, FirstPage, NewestFirstCursorPagination
from core.prepared import Prepared, with_related
from jobs import logs, services
from jobs.filtersets import JobFilterSet
from jobs.lifecycle import retention
from jobs.live import logstore, usage
from jobs.models import Job, JobEvent, Replica

from .serializers import (
    JobCloneSerializer,
    JobDetailSerializer,
    JobSerializer,
    JobSubmitSerializer,
    LogQuerySerializer,
    LogSerializer,
    MergedLineSerializer,
    MergedQuerySerializer,
    ReplicaUsageSerializer,
)

_Row = TypeVar("_Row")  # what a queryset yields (filter_queryset keeps it)


def _moment(seconds: float | None) -> datetime | None:
    return datetime.fromtimestamp(seconds, UTC) if seconds is not None else None


# The job a job was cloned from is read for its name alone (the serializers' `cloned_from`): its
# other columns were a third of the job query's, each compiled and decoded on every request.
_SOURCE_NAME_ONLY = [f"cloned_from__{f.name}" for f in Job._meta.concrete_fields if f.name not in ("id", "name")]
# So are a listed job's datacenter and registry (a registry's password is not decrypted to list
# jobs); a job the views act on (kill, clone...) keeps them whole, for the services that use them.
_LISTED_NAMES_ONLY = [f"{relation}__{f.name}"
                      for relation, model in [("datacenter", Datacenter), ("registry", Registry)]
                      for f in model._meta.concrete_fields if f.name not in ("id", "name")]

# A job's replicas (with their newest usage sample) and events, as its detail reads them: built
# once, as resolving the usage subqueries again for each request was 0.4 ms of its CPU.
_REPLICAS = usage.with_latest(Replica.objects.all())
_EVENTS = JobEvent.objects.select_related("replica")
_JOBS = Job.objects.filter(deleting=False).select_related("datacenter", "registry", "cloned_from").defer(
    *_SOURCE_NAME_ONLY)

# The same three queries for a job's detail (GET), their SQL compiled once per process instead of
# once per request (core/prepared.py): compiling was about a third of a detail's CPU.
_DETAIL_JOB = Prepared(lambda user_id, name: _JOBS.filter(user_id=user_id, name=name).order_by(), int, str)
_DETAIL_REPLICAS = Prepared(lambda job_id: _REPLICAS.filter(job_id=job_id), int)
_DETAIL_EVENTS = Prepared(lambda job_id: _EVENTS.filter(job_id=job_id), int)
# A plain list's first page (no query parameters: no filter, the default order and size), as the
# cursor pagination reads it (core.pagination.FirstPage), its SQL compiled once per process too.
_FIRST_PAGE = Prepared(lambda user_id: _JOBS.filter(user_id=user_id).defer(*_LISTED_NAMES_ONLY).order_by(
    *NewestFirstCursorPagination.ordering)[:PAGE_SIZE + 1], int)


class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, OwnedViewSet[Job]):
    queryset = _JOBS
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    filterset_class = JobFilterSet
    pagination_class = NewestFirstCursorPagination  # a user may have 100,000 jobs

    def get_queryset(self) -> QuerySet[Job]:
        qs = super().get_queryset()
        if self.action == "list":
            return qs.defer(*_LISTED_NAMES_ONLY)
        # a copy of each (the prefetch adds hints to the queryset it is given)
        return qs.prefetch_related(Prefetch("replicas", _REPLICAS.all()), Prefetch("events", _EVENTS.all()))

    def get_object(self) -> Job:
        # A plain GET of a job (the API's most frequent request): the prepared queries, which read
        # what get_queryset's would. With query parameters the filterset applies, as to any lookup.
        name = self.kwargs.get("name")
        if self.action != "retrieve" or self.request.query_params or not isinstance(name, str) or "\x00" in name:
            return super().get_object()
        found = _DETAIL_JOB.fetch(self.request.user.pk, name)  # at most one: names are unique per user
        if not found:
            raise NotFound()
        job = found[0]
        self.check_object_permissions(self.request, job)
        with_related(job, replicas=_DETAIL_REPLICAS.fetch(job.pk), events=_DETAIL_EVENTS.fetch(job.pk))
        return job

    def paginate_queryset(self, queryset: QuerySet[Job, _Row] | Sequence[_Row]) -> list[_Row] | None:
        if self.action == "list" and not self.request.query_params and isinstance(queryset, QuerySet):
            user_id = self.request.user.pk
            first = FirstPage(queryset, NewestFirstCursorPagination.ordering, PAGE_SIZE,
                              lambda: list(_FIRST_PAGE.fetch(user_id)))
            # the paginator reads the page through FirstPage's order_by and slice alone
            return super().paginate_queryset(first)  # type: ignore[arg-type]
        return super().paginate_queryset(queryset)

    def get_serializer_class(self) -> type[JobSerializer]:
        return JobSerializer if self.action == "list" else JobDetailSerializer

    def filter_queryset(self, queryset: QuerySet[Job, _Row]) -> QuerySet[Job, _Row]:
        # Without query parameters JobFilterSet filters nothing (jobs/tests/test_list_queries.py),
        # yet building and validating its form was a tenth of a job detail's or list's CPU.
        if not self.request.query_params:
            return queryset
        return super().filter_queryset(queryset)

    @extend_schema(request=JobSubmitSerializer, responses={201: JobDetailSerializer})
    def create(self, request: AuthenticatedRequest) -> Response:
        with field_errors():  # the service checks every field against the spec, so all errors come at once
            # a body that is no JSON object is refused by the service (jobs.submission.validation)
            job = services.submit_job(request.user, request.data)  # type: ignore[arg-type]
        return Response(JobDetailSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={204: None}, parameters=[OpenApiParameter(
        "checkpoints", bool, description="Also delete its checkpoint directory (kept by default: a job submitted "
                                         "again under the name resumes from it).")])
    def destroy(self, request: AuthenticatedRequest, name: str | None = None) -> Response:
        """Delete the job: kill it if running, then remove its history and logs (and, if asked, its checkpoints)."""
        services.delete_job(self.get_object(), checkpoints=request.query_params.get("checkpoints") in ("1", "true"))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def kill(self, request: AuthenticatedRequest, name: str | None = None) -> Response:
        """Stop every replica (SIGTERM, then SIGKILL after a grace period); the job becomes Killed."""
        job = self.get_object()
        if not services.kill_job(job):
            raise serializers.ValidationError({"state": [f"the job has already ended ({job.state})"]})
        killed = self.get_queryset().filter(pk=job.pk).first()
        if killed is None:  # deleted meanwhile
            raise NotFound()
        return Response(JobDetailSerializer(killed).data)

    @extend_schema(request=JobCloneSerializer, responses={201: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def clone(self, request: AuthenticatedRequest, name: str | None = None) -> Response:
        """Submit the job again, with the fields given in the body changed (validated like a submission)."""
        source = self.get_object()
        with field_errors():
            job = services.clone_job(request.user, source, request.data)  # type: ignore[arg-type]  # as above
        return Response(JobDetailSerializer(self.get_queryset().get(pk=job.pk)).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def suspend(self, request: AuthenticatedRequest, name: str | None = None) -> Response:
        """Stop the job and free its resources, keeping it: its replicas get SIGTERM (time to checkpoint) and the
        job becomes Suspended; a queued job leaves the queue."""
        with field_errors():
            services.suspend_job(self.get_object())
        return self._current(name)

    @extend_schema(request=None, responses={200: JobDetailSerializer})
    @action(detail=True, methods=["post"])
    def resume(self, request: AuthenticatedRequest, name: str | None = None) -> Response:
        """Queue a suspended job again; it continues from its checkpoint where the program keeps one."""
        with field_errors():
            services.resume_job(self.get_object())
        return self._current(name)

    def _current(self, name: str | None) -> Response:
        job = self.get_queryset().filter(name=name).first()
        if job is None:  # deleted meanwhile
            raise NotFound()
        return Response(JobDetailSerializer(job).data)

    @extend_schema(responses={200: ReplicaUsageSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def usage(self, request: AuthenticatedRequest, name: str | None = None) -> Response:
        """Each replica's kept CPU and memory samples, oldest first (kept after the job ends)."""
        job = self.get_object()
        out = [{"replica": r.name, "samples": usage.series(r)} for r in job.replicas.all()]
        # many=True takes a list; DRF's stubs type the one instance only (so below)
        return Response(ReplicaUsageSerializer(out, many=True).data)  # type: ignore[arg-type]

    @extend_schema(
        parameters=[LogQuerySerializer],
        responses={200: LogSerializer(many=True)},
    )
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def logs(self, request: AuthenticatedRequest, name: str | None = None) -> Response:
        """The job's logs: the runtime build's (`build`, once it has output) and each replica's."""
        query = LogQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        job = self.get_object()
        wanted = query.validated_data.get("replica")
        if wanted:
            source = logs.find(job, wanted)
            if source is None:
                raise serializers.ValidationError({"replica": [f"job {job.name} has no replica '{wanted}'"]})
            found = [source]
        else:
            found = logs.sources(job)
        out = []
        for source in found:
            entry: dict[str, Any] = {"replica": source.name, "state": logs.state(job, source)}
            if "q" in query.validated_data:
                matches, truncated = logs.search(source, query.validated_data["q"])
                end = logstore.size(source)
                entry.update(text="", offset=0, next_offset=end, notice=retention.notice(job),
                             matches=[vars(m) for m in matches], truncated=truncated)
            else:
                with field_errors():
                    chunk = logs.read(job, source, offset=query.validated_data.get("offset"),
                                      lines=query.validated_data["lines"])
                entry.update(text=chunk.text, offset=chunk.offset, next_offset=chunk.next_offset, notice=chunk.notice)
            out.append(entry)
        return Response(LogSerializer(out, many=True).data)  # type: ignore[arg-type]

    @extend_schema(parameters=[MergedQuerySerializer], responses={200: MergedLineSerializer(many=True)})
    @action(detail=True, methods=["get"], url_path="logs/merged", pagination_class=None, filterset_class=None)
    def merged_logs(self, request: AuthenticatedRequest, name: str | None = None) -> Response:
        """The last lines of all the job's logs together (the build's and every replica's), in the order they
        were written, each with its replica and time."""
        query = MergedQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        lines = logs.merged(self.get_object(), query.validated_data["lines"])
        out = [{"time": _moment(line.time), "replica": line.replica, "text": line.text} for line in lines]
        return Response(MergedLineSerializer(out, many=True).data)  # type: ignore[arg-type]
