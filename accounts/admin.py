from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from knox.models import AuthToken

from core.admin_base import StrictLookupsAdmin

from . import services
from .forms import AdminLoginForm
from .models import ApiToken, Registry

# The admin's login checks passwords through the same brute-force throttle as every login.
admin.site.login_form = AdminLoginForm
# Knox's own page lists token hashes; operators see and revoke tokens by name below (ApiTokenAdmin).
admin.site.unregister(AuthToken)


class RegistryForm(forms.ModelForm[Registry]):
    password = forms.CharField(widget=forms.PasswordInput(render_value=False), required=False,
                               help_text="Stored encrypted. Leave empty to keep the current one.")

    class Meta:
        model = Registry
        fields = ["user", "name", "server", "username", "password"]

    def clean_server(self) -> str:
        value: str = self.cleaned_data["server"].strip()
        if not services.valid_registry_server(value):
            raise forms.ValidationError(services.REGISTRY_SERVER_FORM)
        return value

    def clean_password(self) -> str:
        value: str = self.cleaned_data["password"]
        if not value and self.instance.pk:
            # The stored password stays only where its owner sent it: pointing it at another
            # server or account, or handing it to another user, takes a new one.
            moved = {"user", "server", "username"} & set(self.changed_data)
            if moved:
                raise forms.ValidationError(f"changing {', '.join(sorted(moved))} needs the password again")
            stored: str = self.instance.password
            return stored
        if not value:
            raise forms.ValidationError("a password is required")
        return value


@admin.register(Registry)
class RegistryAdmin(StrictLookupsAdmin[Registry]):
    form = RegistryForm
    list_display = ["name", "user", "server", "username", "created"]
    list_filter = ["server"]
    search_fields = ["name", "server", "user__username"]
    list_select_related = ["user"]


@admin.register(ApiToken)
class ApiTokenAdmin(StrictLookupsAdmin[ApiToken]):
    """Every user's tokens by name; deleting one revokes it (knox's own page shows only hashes)."""

    list_display = ["name", "user", "created", "expiry"]
    search_fields = ["name", "user__username"]
    list_select_related = ["user", "auth_token"]
    readonly_fields = ("name", "user", "created", "expiry")
    fields = readonly_fields

    @admin.display(ordering="auth_token__created")
    def created(self, obj: ApiToken) -> Any:
        return obj.auth_token.created

    @admin.display(ordering="auth_token__expiry", description="expires")
    def expiry(self, obj: ApiToken) -> Any:
        return obj.auth_token.expiry or "never"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        services.revoke_token(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        services.revoke_tokens(queryset)
