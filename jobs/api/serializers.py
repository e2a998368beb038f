from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api import PlainFieldsRepresentation
from jobs import services
from jobs.live import usage
from jobs.live.logstore import MAX_LOG_LINES, MAX_LOG_OFFSET
from jobs.models import Job, JobEvent, Replica
from jobs.spec import SPEC
from jobs.submission.serializer import JobCloneSerializer, JobSubmitSerializer

__all__ = ["JobSubmitSerializer", "JobCloneSerializer", "JobSerializer", "JobDetailSerializer", "LogQuerySerializer",
           "LogSerializer", "MergedLineSerializer", "MergedQuerySerializer", "ReplicaUsageSerializer"]


class UsagePointSerializer(serializers.Serializer[usage.Point]):
    taken = serializers.DateTimeField()
    cpu_percent = serializers.FloatField(allow_null=True, help_text="100 = one core busy; null until known.")
    memory_bytes = serializers.IntegerField()


class ReplicaUsageSerializer(serializers.Serializer[dict[str, Any]]):
    replica = serializers.CharField()
    samples = UsagePointSerializer(many=True, help_text="Oldest first; the newest USAGE_SAMPLES_KEPT.")


class ReplicaSerializer(PlainFieldsRepresentation, serializers.ModelSerializer[Replica]):
    name = serializers.CharField(read_only=True)
    usage = serializers.SerializerMethodField(help_text="The newest CPU and memory sample; null before the first.")

    class Meta:
        model = Replica
        fields = ["name", "role", "index", "state", "reason", "message", "host", "port", "pod", "exit_code",
                  "restarts", "attempt", "started", "finished", "usage"]

    @extend_schema_field(UsagePointSerializer(allow_null=True))
    def get_usage(self, replica: Replica) -> dict[str, Any] | None:
        point = usage.latest(replica)
        return UsagePointSerializer(point).data if point else None


class JobEventSerializer(PlainFieldsRepresentation, serializers.ModelSerializer[JobEvent]):
    replica = serializers.CharField(source="replica.name", default=None, read_only=True, allow_null=True,
                                    help_text="The replica it concerns; null for the job itself.")

    class Meta:
        model = JobEvent
        fields = ["created", "replica", "state", "reason", "message"]


class JobSerializer(PlainFieldsRepresentation, serializers.ModelSerializer[Job]):
    datacenter = serializers.CharField(source="datacenter.name", read_only=True)
    registry = serializers.CharField(source="registry.name", default=None, read_only=True, allow_null=True)
    cloned_from = serializers.CharField(source="cloned_from.name", default=None, read_only=True, allow_null=True,
                                        help_text="The name of the job this one was cloned from (null: none, or "
                                                  "that job was deleted).")
    purged = serializers.DateTimeField(read_only=True, allow_null=True, help_text=(
        "When the retention policy removed the job's logs and working files; null while they are kept."))

    class Meta:
        model = Job
        fields = [*(f.name for f in SPEC), "k8s_name", "state", "reason", "message", "queue_position", "created",
                  "queued_at", "started", "finished", "restarts", "cloned_from", "purged"]
        read_only_fields = fields
        extra_kwargs = {"queue_position": {"help_text": "A queued job's place in its datacenter's queue (1: next); "
                                                        "why it waits is in reason and message."}}


class JobDetailSerializer(JobSerializer):
    replicas = ReplicaSerializer(many=True, read_only=True)
    events = JobEventSerializer(many=True, read_only=True)
    waiting = serializers.SerializerMethodField(help_text="Why a queued job waits on the service itself "
                                                          "(e.g. no worker is running); empty otherwise.")

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "waiting", "replicas", "events"]
        read_only_fields = fields

    def get_waiting(self, job: Job) -> str:
        return services.waiting_reason(job)


class LogQuerySerializer(serializers.Serializer[Any]):  # a query: no instance
    replica = serializers.CharField(required=False, max_length=64,
                                    help_text="e.g. trainer-0, or build (the runtime build's log); all when omitted")
    offset = serializers.IntegerField(required=False, min_value=0, max_value=MAX_LOG_OFFSET,
                                      help_text="Read on from this byte offset (a next_offset seen before)")
    lines = serializers.IntegerField(required=False, default=100, min_value=0, max_value=MAX_LOG_LINES,
                                     help_text="The last N lines, when no offset is given")
    q = serializers.CharField(required=False, min_length=1, max_length=200, trim_whitespace=False,
                              help_text="Search the whole log for this text (any case): the matching lines come in "
                                        "`matches` with their line numbers, and `text` is empty")


class LogMatchSerializer(serializers.Serializer[dict[str, Any]]):
    line = serializers.IntegerField(help_text="1-based line number in the whole log.")
    offset = serializers.IntegerField(help_text="Byte offset where the line starts (read on from it with ?offset=).")
    text = serializers.CharField()


class MergedQuerySerializer(serializers.Serializer[Any]):  # a query: no instance
    lines = serializers.IntegerField(required=False, default=300, min_value=0, max_value=MAX_LOG_LINES,
                                     help_text="The last N lines of all the logs together")


class MergedLineSerializer(serializers.Serializer[dict[str, Any]]):
    time = serializers.DateTimeField(allow_null=True, help_text="When it was written, to about a second "
                                                                "(null: not seen by the watcher yet).")
    replica = serializers.CharField()
    text = serializers.CharField()


class LogSerializer(serializers.Serializer[dict[str, Any]]):
    replica = serializers.CharField()
    text = serializers.CharField()
    offset = serializers.IntegerField(help_text="Byte offset where text starts.")
    next_offset = serializers.IntegerField(help_text="Pass as ?offset= to continue without gaps or repeats.")
    state = serializers.CharField(help_text="The replica's state; stop following once it has ended.")
    notice = serializers.CharField(allow_blank=True, help_text=(
        "Why lines may be missing right now (e.g. the node's kubelet does not answer); empty when "
        "the log is coming in. The missing lines are fetched once it answers again."))
    matches = LogMatchSerializer(many=True, required=False, help_text="With ?q=: the matching lines.")
    truncated = serializers.BooleanField(required=False, help_text="With ?q=: more lines matched than listed.")
