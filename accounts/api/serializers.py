from rest_framework import serializers

from accounts.models import Datacenter, Registry


class RegistrySerializer(serializers.ModelSerializer):
    password = serializers.CharField(write_only=True, allow_blank=True, style={"input_type": "password"})

    class Meta:
        model = Registry
        fields = ["name", "server", "username", "password", "created"]
        read_only_fields = ["created"]
        # Every rule lives in accounts.services.create_registry, which reports all errors at once.
        extra_kwargs = {"name": {"validators": [], "allow_blank": True}, "server": {"allow_blank": True},
                        "username": {"allow_blank": True}}


class DatacenterSerializer(serializers.ModelSerializer):
    class Meta:
        model = Datacenter
        fields = ["name", "backend", "description"]


class TokenRequestSerializer(serializers.Serializer):
    username = serializers.CharField()
    password = serializers.CharField(style={"input_type": "password"})


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField()
