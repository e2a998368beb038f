from django import forms
from django.contrib import admin
from django.utils.html import format_html_join

from . import services
from .models import ApiToken, Datacenter, Registry


class DatacenterForm(forms.ModelForm):
    kubeconfig = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 6, "placeholder": "(unchanged)"}), required=False,
        help_text="Kubernetes only: paste a kubeconfig (YAML) to replace the stored one; leave empty to keep it. "
                  "Never shown again. With none stored, the service account of the pod the service runs in is used.")
    clear_kubeconfig = forms.BooleanField(required=False, help_text="Forget the stored kubeconfig (use in-cluster).")

    class Meta:
        model = Datacenter
        fields = ["name", "backend", "description", "config", "kubeconfig", "capacity_cpu_millicores",
                  "capacity_memory_bytes", "capacity_gpus", "default_max_restarts"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.initial["kubeconfig"] = ""  # write-only: the stored one is never sent to a browser

    def clean_kubeconfig(self):
        value = self.cleaned_data["kubeconfig"].strip()
        if not value:
            return "" if self.data.get("clear_kubeconfig") else (self.instance.kubeconfig if self.instance.pk else "")
        import yaml

        try:
            data = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise forms.ValidationError(f"not YAML: {e}") from e
        if not isinstance(data, dict) or not data.get("clusters"):
            raise forms.ValidationError("not a kubeconfig: it has no clusters")
        return value

    def clean(self):
        cleaned = super().clean()
        backend = cleaned.get("backend")
        if backend:
            from jobs.backends.registry import backend_class

            try:
                backend_class(backend).check_config(cleaned.get("name") or "", cleaned.get("config") or {})
            except ValueError as e:
                self.add_error("config", str(e))
        return cleaned


@admin.register(Datacenter)
class DatacenterAdmin(admin.ModelAdmin):
    form = DatacenterForm
    list_display = ["name", "backend", "description", "created"]
    list_filter = ["backend"]
    search_fields = ["name", "description"]
    readonly_fields = ["isolation", "queue_capacity"]

    @admin.display(description="Isolation of jobs")
    def isolation(self, obj):
        from jobs.backends.base import LaunchError
        from jobs.backends.registry import get_backend

        if obj is None or obj.pk is None:
            return "-"
        try:
            lines = get_backend(obj).isolation()
        except LaunchError as e:
            lines = [e.message]
        return format_html_join("", "<div>{}</div>", ((line,) for line in lines)) if lines else "-"


    @admin.display(description="Capacity the queue admits against")
    def queue_capacity(self, obj):
        from quotas.services import capacity
        from quotas.units import format_bytes, format_cpu

        if obj is None or obj.pk is None:
            return "-"
        cap = capacity(obj)
        parts = [f"{format_cpu(cap.cpu_millicores)} CPU" if cap.cpu_millicores is not None else "CPU: no limit",
                 f"{format_bytes(cap.memory_bytes)} memory" if cap.memory_bytes is not None else "memory: no limit",
                 f"{cap.gpus} GPU" if cap.gpus is not None else "GPU: no limit"]
        return ", ".join(parts) + " (empty fields: the machine's own locally, no limit on Kubernetes)"


class RegistryForm(forms.ModelForm):
    password = forms.CharField(widget=forms.PasswordInput(render_value=False), required=False,
                               help_text="Stored encrypted. Leave empty to keep the current one.")

    class Meta:
        model = Registry
        fields = ["user", "name", "server", "username", "password"]

    def clean_password(self):
        value = self.cleaned_data["password"]
        if not value and self.instance.pk:
            return self.instance.password
        if not value:
            raise forms.ValidationError("a password is required")
        return value


@admin.register(Registry)
class RegistryAdmin(admin.ModelAdmin):
    form = RegistryForm
    list_display = ["name", "user", "server", "username", "created"]
    list_filter = ["server"]
    search_fields = ["name", "server", "user__username"]
    list_select_related = ["user"]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Every user's tokens by name; deleting one revokes it (knox's own page shows only hashes)."""

    list_display = ["name", "user", "created", "expiry"]
    search_fields = ["name", "user__username"]
    list_select_related = ["user", "auth_token"]
    readonly_fields = ["name", "user", "created", "expiry"]
    fields = readonly_fields

    @admin.display(ordering="auth_token__created")
    def created(self, obj):
        return obj.auth_token.created

    @admin.display(ordering="auth_token__expiry", description="expires")
    def expiry(self, obj):
        return obj.auth_token.expiry or "never"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def delete_model(self, request, obj):
        services.revoke_token(obj)

    def delete_queryset(self, request, queryset):
        services.revoke_tokens(queryset)
