from rest_framework import serializers

from jobs import services
from jobs import validation as v
from jobs.logstore import MAX_LOG_LINES, MAX_LOG_OFFSET
from jobs.models import Job, JobEvent, Replica


class ReplicaSerializer(serializers.ModelSerializer):
    name = serializers.CharField(read_only=True)

    class Meta:
        model = Replica
        fields = ["name", "role", "index", "state", "reason", "message", "host", "port", "pod", "exit_code",
                  "restarts", "started", "finished"]


class JobEventSerializer(serializers.ModelSerializer):
    replica = serializers.CharField(source="replica.name", default=None, read_only=True, allow_null=True,
                                    help_text="The replica it concerns; null for the job itself.")

    class Meta:
        model = JobEvent
        fields = ["created", "replica", "state", "reason", "message"]


class JobSerializer(serializers.ModelSerializer):
    datacenter = serializers.CharField(source="datacenter.name", read_only=True)
    registry = serializers.CharField(source="registry.name", default=None, read_only=True, allow_null=True)

    class Meta:
        model = Job
        fields = ["name", "datacenter", "mode", "package", "entry", "pservers", "trainers", "cpu", "memory", "gpu",
                  "pscpu", "psmemory", "image", "registry", "env", "passes", "timeout", "state", "reason",
                  "message", "created", "started", "finished"]
        read_only_fields = fields


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


class JobCreateSerializer(serializers.Serializer):
    """Types only: every rule and bound lives in jobs.validation, shared with the form and /api/v1,
    so all of a submission's errors come back at once."""

    name = serializers.CharField(max_length=100, help_text="DNS-1123 label: lowercase letters, digits, '-'.")
    package = serializers.CharField(max_length=4096, help_text="PFS directory, /pfs/<dc>/home/<you>/...")
    entry = serializers.CharField(max_length=1024, help_text="Command to start each replica, e.g. 'python train.py'.")
    datacenter = serializers.CharField(required=False)
    mode = serializers.ChoiceField(choices=Job.Mode.choices, required=False)
    pservers = serializers.IntegerField(required=False, help_text=f"0 to {v.MAX_PSERVERS}; at least 1 in ps mode.")
    trainers = serializers.IntegerField(required=False, help_text=f"1 to {v.MAX_TRAINERS}.")
    cpu = serializers.CharField(required=False, help_text="Per trainer, e.g. 1 or 500m.")
    memory = serializers.CharField(required=False, help_text="Per trainer, e.g. 1Gi.")
    gpu = serializers.IntegerField(required=False, help_text=f"Per trainer, 0 to {v.MAX_GPUS}.")
    pscpu = serializers.CharField(required=False)
    psmemory = serializers.CharField(required=False)
    image = serializers.CharField(required=False, allow_blank=True)
    registry = serializers.CharField(required=False, allow_blank=True)
    env = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False), required=False,
        help_text=f"Extra environment variables: at most {v.MAX_ENV_VARS}, {v.MAX_ENV_BYTES // 1024} KiB of names "
                  "and values together, names like [A-Za-z_][A-Za-z0-9_]*, none of the process contract's.")
    passes = serializers.IntegerField(required=False, help_text=f"1 to {v.MAX_PASSES}.")
    timeout = serializers.IntegerField(required=False, allow_null=True,
                                       help_text=f"Seconds running before the job fails (1 to {v.MAX_TIMEOUT}).")


class LogQuerySerializer(serializers.Serializer):
    replica = serializers.CharField(required=False, max_length=64,
                                    help_text="e.g. trainer-0; all replicas when omitted")
    offset = serializers.IntegerField(required=False, min_value=0, max_value=MAX_LOG_OFFSET,
                                      help_text="Read on from this byte offset (a next_offset seen before)")
    lines = serializers.IntegerField(required=False, default=100, min_value=0, max_value=MAX_LOG_LINES,
                                     help_text="The last N lines, when no offset is given")


class LogSerializer(serializers.Serializer):
    replica = serializers.CharField()
    text = serializers.CharField()
    offset = serializers.IntegerField(help_text="Byte offset where text starts.")
    next_offset = serializers.IntegerField(help_text="Pass as ?offset= to continue without gaps or repeats.")
    state = serializers.CharField(help_text="The replica's state; stop following once it has ended.")
    notice = serializers.CharField(allow_blank=True, help_text=(
        "Why lines may be missing right now (e.g. the node's kubelet does not answer); empty when "
        "the log is coming in. The missing lines are fetched once it answers again."))
