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
        fields = ["name", "backend", "description", "config", "kubeconfig"]

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


def local_isolation(dc: Datacenter) -> list[str]:
    """What a local datacenter enforces on its jobs on this machine, and what it does not."""
    from jobs.backends.local import cgroups, config, sandbox

    try:
        cfg = config.parse(dc.config)
    except config.SettingsError as e:
        return [f"Jobs fail until the config is fixed: {e}"]
    if not cfg.sandboxed:
        lines = ["Sandbox OFF (isolation: none): jobs run as the service's user and can read and change "
                 "everything it can, every user's data included. For a single-user machine only."]
    elif why := sandbox.probe():
        lines = [f"Sandbox UNAVAILABLE: jobs fail with SandboxUnavailable. {why}"]
    else:
        way_out = ("internet access through slirp4netns (never the host's loopback)" if cfg.internet
                   else "no network access beyond the job's own replicas")
        lines = [f"Sandbox enforced (bubblewrap): every job runs as its user's own uid in a network namespace "
                 f"of its own, every replica in its own mount and PID namespace, with no capabilities; {way_out}."]
    support = cgroups.support()
    enforced = {"memory": "memory", "cpu": "CPU", "pids": f"pids (at most {cfg.pids_limit} per replica)"}
    lines += [f"Limit enforced: {enforced[c]}" for c in sorted(support.parents)]
    lines += [f"Limit NOT enforced: {c}: {reason}" for c, reason in sorted(support.missing.items())]
    return lines


@admin.register(Datacenter)
class DatacenterAdmin(admin.ModelAdmin):
    form = DatacenterForm
    list_display = ["name", "backend", "description", "created"]
    list_filter = ["backend"]
    search_fields = ["name", "description"]
    readonly_fields = ["isolation"]

    @admin.display(description="Isolation of jobs")
    def isolation(self, obj):
        if obj is None or obj.pk is None or obj.backend != Datacenter.Backend.LOCAL:
            return "-"
        return format_html_join("", "<div>{}</div>", ((line,) for line in local_isolation(obj)))


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
