"""Users and groups in the operators' console. Staff act by the permissions they are given, but only
a superuser grants privileges: Django's own UserAdmin lets anyone allowed to change users make
themselves superuser or set a superuser's password. Here, in jobs/ because a user's jobs decide
whether the user may go."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.contrib import admin
from django.contrib.auth.admin import GroupAdmin as DjangoGroupAdmin
from django.contrib.auth.admin import UserAdmin as DjangoUserAdmin
from django.contrib.auth.models import Group, User
from django.db.models import QuerySet
from django.http import HttpRequest

from core.admin_base import StrictLookupsAdmin

from .models import Job

PRIVILEGES = ("is_staff", "is_superuser", "groups", "user_permissions")


def _privileged(user: Any) -> bool:
    return bool(user.is_staff or user.is_superuser)


class UserAdmin(StrictLookupsAdmin[User], DjangoUserAdmin[User]):
    def get_readonly_fields(self, request: HttpRequest, obj: User | None = None) -> tuple[str, ...]:
        fields = tuple(super().get_readonly_fields(request, obj))
        return fields if request.user.is_superuser else (*fields, *PRIVILEGES)

    def has_change_permission(self, request: HttpRequest, obj: User | None = None) -> bool:
        # Another staff member's account (its password above all) is a superuser's to change.
        others = obj is not None and obj.pk != request.user.pk and _privileged(obj)
        return super().has_change_permission(request, obj) and (request.user.is_superuser or not others)

    def has_delete_permission(self, request: HttpRequest, obj: User | None = None) -> bool:
        others = obj is not None and obj.pk != request.user.pk and _privileged(obj)
        return super().has_delete_permission(request, obj) and (request.user.is_superuser or not others)

    def get_deleted_objects(self, objs: Sequence[User] | QuerySet[User], request: HttpRequest) -> Any:
        """A user's jobs are removed by the jobs' service (processes, files, cluster objects), which
        needs the job's row: deleting the user first would cascade the rows and orphan the rest."""
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        users = [o.pk for o in objs]
        for job in Job.objects.filter(user__in=users).select_related("user").order_by("user", "name"):
            what = "being deleted: wait until it is gone" if job.deleting else "delete it first (Jobs)"
            protected.append(f"{job.user.get_username()}'s job {job.name} ({job.state}): {what}")
        if not request.user.is_superuser and any(o.pk != request.user.pk and _privileged(o) for o in objs):
            perms_needed.add("superuser (to delete another staff member)")
        return deleted, counts, perms_needed, protected


class GroupAdmin(StrictLookupsAdmin[Group], DjangoGroupAdmin):
    """A group's permissions are privileges of everyone in it: a superuser's to give."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: Group | None = None) -> bool:
        return bool(request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Group | None = None) -> bool:
        return bool(request.user.is_superuser)


admin.site.unregister(User)
admin.site.unregister(Group)
admin.site.register(User, UserAdmin)
admin.site.register(Group, GroupAdmin)
