import math
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.models import User

from core.admin_base import StrictLookupsAdmin

from .models import Quota
from .units import cpu_millicores, format_bytes, format_cpu, quantity

# The columns' largest value (PositiveBigIntegerField): beyond it the database refuses the row.
MOST = 2**63 - 1


def as_quantity(n: int) -> str:
    """Bytes in the largest binary unit that writes them exactly: 34359738368 -> '32Gi'."""
    for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n and n % size == 0:
            return f"{n // size}{suffix}"
    return str(n)


class QuotaForm(forms.ModelForm[Quota]):
    """CPU, memory and storage as the list shows them and jobs ask for them ("8", "32Gi"), not in
    millicores and bytes."""

    cpu = forms.CharField(label="CPU", help_text="Cores for the running jobs together, e.g. 8 or 0.5 (500m).")
    memory = forms.CharField(help_text="Memory of the running jobs together, e.g. 32Gi or 512Mi.")
    storage = forms.CharField(help_text="The user's PFS home, e.g. 100Gi or 1Ti (0: nothing may be stored).")

    class Meta:
        model = Quota
        fields = ["datacenter", "user", "cpu", "memory", "gpus", "max_running_jobs", "max_queued_jobs", "storage",
                  "max_priority"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        q = self.instance
        self.initial.setdefault("cpu", format_cpu(q.cpu_millicores))
        self.initial.setdefault("memory", as_quantity(q.memory_bytes))
        self.initial.setdefault("storage", as_quantity(q.storage_bytes))

    def clean_cpu(self) -> int:
        try:
            value = cpu_millicores(self.cleaned_data["cpu"])
        except ValueError as e:
            raise forms.ValidationError(str(e)) from None
        if value > MOST:
            raise forms.ValidationError(f"at most {format_cpu(MOST)} cores")
        return value

    def _bytes(self, name: str) -> int:
        try:
            value = math.ceil(quantity(self.cleaned_data[name]))
        except ValueError:
            raise forms.ValidationError(f"'{self.cleaned_data[name]}' is not an amount: use a number with Ki, "
                                        "Mi, Gi or Ti, like 512Mi or 100Gi") from None
        if value > MOST:
            raise forms.ValidationError("must be less than 8Ei")
        return value

    def clean_memory(self) -> int:
        return self._bytes("memory")

    def clean_storage(self) -> int:
        return self._bytes("storage")

    def save(self, commit: bool = True) -> Quota:
        self.instance.cpu_millicores = self.cleaned_data["cpu"]
        self.instance.memory_bytes = self.cleaned_data["memory"]
        self.instance.storage_bytes = self.cleaned_data["storage"]
        saved: Quota = super().save(commit)
        return saved


@admin.register(Quota)
class QuotaAdmin(StrictLookupsAdmin[Quota]):
    form = QuotaForm
    list_display = ["datacenter", "who", "cpu", "memory", "gpus", "max_running_jobs", "storage"]
    list_filter = ["datacenter"]
    search_fields = ["user__username"]
    list_select_related = ["datacenter", "user"]

    @admin.display(description="user")
    def who(self, obj: Quota) -> User | str:
        return obj.user or "(default)"

    @admin.display(description="CPU")
    def cpu(self, obj: Quota) -> str:
        return format_cpu(obj.cpu_millicores)

    @admin.display(description="memory")
    def memory(self, obj: Quota) -> str:
        return format_bytes(obj.memory_bytes)

    @admin.display(description="storage")
    def storage(self, obj: Quota) -> str:
        return format_bytes(obj.storage_bytes)
