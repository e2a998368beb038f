"""The floor of bench/web.py: the least an authenticated API job detail can do here. The service's
own ASGI application and middleware (paddleweb/asgi.py, MIDDLEWARE), served exactly as the
Procfile serves the service, routing one plain Django view (no DRF): it reads the request's token
with its user (one query), checks the token's digest as knox does, reads the job's row (one query)
and returns it as JSON. The service's detail against it says how much of the gap to the bare view
(bench/bare_django.py) is the detail's own work (DRF, its further queries, serializing) and how
much the stack every request goes through."""

import os
from datetime import UTC
from hmac import compare_digest

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "paddleweb.settings")

import django
from django.conf import settings

settings.ROOT_URLCONF = __name__
django.setup(set_prefix=False)

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.http import HttpRequest, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.utils import timezone  # noqa: E402
from knox.crypto import hash_token  # noqa: E402
from knox.models import get_token_model  # noqa: E402
from knox.settings import CONSTANTS  # noqa: E402

from jobs.models import Job  # noqa: E402

_TOKEN_SQL = (f'SELECT t.digest, t.expiry, u.id, u.is_active FROM "{get_token_model()._meta.db_table}" t '
              f'JOIN "{get_user_model()._meta.db_table}" u ON u.id = t.user_id WHERE t.token_key = %s')
_COLUMNS = [f.column for f in Job._meta.concrete_fields]
_JOB_SQL = (f"SELECT {', '.join(map(connection.ops.quote_name, _COLUMNS))} FROM "
            f"{connection.ops.quote_name(Job._meta.db_table)} WHERE user_id = %s AND name = %s AND NOT deleting")


def view(request: HttpRequest, name: str) -> JsonResponse:
    kind, _, token = request.headers.get("Authorization", "").partition(" ")
    if kind != "Token" or not token:
        return JsonResponse({"detail": "Authentication credentials were not provided."}, status=401)
    with connection.cursor() as cursor:
        cursor.execute(_TOKEN_SQL, [token[:CONSTANTS.TOKEN_KEY_LENGTH]])
        found = cursor.fetchone()
        # SQLite's cursor gives the expiry without its zone (UTC, as Django stores it)
        expiry = found and found[1] and (found[1] if timezone.is_aware(found[1]) else found[1].replace(tzinfo=UTC))
        if (found is None or not found[3] or (expiry and expiry < timezone.now())
                or not compare_digest(hash_token(token), found[0])):
            return JsonResponse({"detail": "Invalid token."}, status=401)
        cursor.execute(_JOB_SQL, [found[2], name])
        row = cursor.fetchone()
    if row is None:
        return JsonResponse({"detail": "No Job matches the given query."}, status=404)
    return JsonResponse(dict(zip(_COLUMNS, row, strict=True)))


urlpatterns = [path("floor/jobs/<str:name>/", view)]

# What the Procfile serves, imported once the patterns above exist (it resolves them at startup).
from paddleweb.asgi import application  # noqa: E402,F401
