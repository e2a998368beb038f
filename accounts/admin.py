from django import forms
from django.contrib import admin

from .models import Datacenter, Registry


@admin.register(Datacenter)
class DatacenterAdmin(admin.ModelAdmin):
    list_display = ["name", "backend", "description", "created"]
    list_filter = ["backend"]
    search_fields = ["name", "description"]


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
