"""The baseline of bench/web.py: a bare Django view (no apps, no middleware, no database) served
exactly as the Procfile serves the service. What any Django page costs at least here."""

import django
from django.conf import settings
from django.http import JsonResponse
from django.urls import path

settings.configure(DEBUG=False, SECRET_KEY="bench", ALLOWED_HOSTS=["*"], ROOT_URLCONF=__name__, MIDDLEWARE=[],
                   INSTALLED_APPS=[], USE_TZ=True)
django.setup()


def view(request):
    return JsonResponse({"name": "bare", "state": "Running"})


urlpatterns = [path("bare/", view)]

from django.core.asgi import get_asgi_application  # noqa: E402

application = get_asgi_application()
