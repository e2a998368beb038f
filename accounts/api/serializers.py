from typing import Any

from rest_framework import serializers

from accounts.models import ApiToken, Datacenter, Registry


class RegistrySerializer(serializers.ModelSerializer[Registry]):
    password = serializers.CharField(write_only=True, allow_blank=True, style={"input_type": "password"})

    class Meta:
        model = Registry
        fields = ["name", "server", "username", "password", "created"]
        read_only_fields = ["created"]
        # Every rule lives in accounts.services.create_registry, which reports all errors at once.
        extra_kwargs = {"name": {"validators": [], "allow_blank": True}, "server": {"allow_blank": True},
                        "username": {"allow_blank": True}}


class DatacenterSerializer(serializers.ModelSerializer[Datacenter]):
    class Meta:
        model = Datacenter
        fields = ["name", "backend", "description"]


class StrictCharField(serializers.CharField):
    """Text only: DRF's CharField would take 0 or true and make it "0" or "True". And at most
    max_length as sent, as the schema says: DRF counts after trimming the ends' whitespace."""

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        if self.max_length is not None and len(data) > self.max_length:
            self.fail("max_length", max_length=self.max_length)
        return super().to_internal_value(data)


class TokenRequestSerializer(serializers.Serializer[Any]):  # a request body: no instance
    username = StrictCharField(max_length=150)
    password = serializers.CharField(max_length=4096, style={"input_type": "password"})
    name = StrictCharField(max_length=64, required=False, allow_blank=True, default="",
                           help_text="The device or purpose of the token; a new token for a name you "
                                     "already use replaces the old one. Unnamed tokens are always new.")
    never_expires = serializers.BooleanField(required=False, default=False,
                                             help_text="Issue a token that does not expire (for clients that "
                                                       "cannot log in again); revoke it when done.")


class NewTokenSerializer(serializers.Serializer[Any]):  # a request body: no instance
    name = StrictCharField(max_length=64, help_text="What it is for, e.g. ci-nightly; one not in use.")
    never_expires = serializers.BooleanField(required=False, default=False,
                                             help_text="A token that does not expire; revoke it when done.")


class ApiTokenSerializer(serializers.ModelSerializer[ApiToken]):
    """A token as listed: never its secret."""

    created = serializers.DateTimeField(source="auth_token.created", read_only=True)
    expiry = serializers.DateTimeField(source="auth_token.expiry", read_only=True, allow_null=True,
                                       help_text="null: never expires")
    current = serializers.SerializerMethodField(help_text="whether this request was made with this token")

    last_used = serializers.DateTimeField(read_only=True, allow_null=True,
                                          help_text="When a request last came with it, to within a minute; null: never")

    class Meta:
        model = ApiToken
        fields = ["id", "name", "created", "expiry", "last_used", "current"]

    def get_current(self, obj: ApiToken) -> bool:
        request = self.context.get("request")
        return obj.auth_token_id == getattr(getattr(request, "auth", None), "pk", None)


class TokenSerializer(ApiTokenSerializer):
    """A new token: the one time its secret is shown."""

    token = serializers.CharField(read_only=True)

    class Meta(ApiTokenSerializer.Meta):
        fields = ["token", *ApiTokenSerializer.Meta.fields]
