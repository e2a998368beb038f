"""The settings → Webhooks page: webhooks (add, edit, test, delete), job-end e-mail and the
delivery log (each message's job, redelivering one)."""

from collections.abc import Iterable

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from accounts.current import AuthenticatedHttpRequest

from . import services, tasks
from .forms import EmailForm, WebhookEditForm, WebhookForm
from .models import Delivery

LOG_ROWS = 50


@login_required
def webhooks(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = WebhookForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            hook = services.create_webhook(request.user, **form.cleaned_data)
        except ValidationError as e:
            for field, errors in e.message_dict.items():
                for error in errors:
                    form.add_error(field if field in form.fields else None, error)
        else:
            messages.success(request, f"Webhook added. Its secret, shown only this once: {hook.secret}")
            return redirect("notifications:webhooks")
    return render(request, "notifications/webhooks.html", {
        "form": form, "webhooks": services.webhooks_of(request.user),
        "email_form": EmailForm(initial={"job_end": services.email_on_job_end(request.user)}),
        "deliveries": _with_job_names(services.deliveries_of(request.user)[:LOG_ROWS])})


def _with_job_names(deliveries: Iterable[Delivery]) -> list[Delivery]:
    rows = list(deliveries)
    for d in rows:
        d.job_name = services.job_name(d)  # type: ignore[attr-defined]  # for the template
    return rows


@login_required
@require_POST
def webhook_delete(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    hook = get_object_or_404(services.webhooks_of(request.user), pk=pk)
    services.delete_webhook(hook)
    messages.success(request, f"Webhook {hook.url} deleted.")
    return redirect("notifications:webhooks")


@login_required
def webhook_edit(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    hook = get_object_or_404(services.webhooks_of(request.user), pk=pk)
    initial = {"url": hook.url, "events": hook.events, "active": hook.active}
    form = WebhookEditForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            services.update_webhook(hook, url=form.cleaned_data["url"], events=form.cleaned_data["events"],
                                    active=form.cleaned_data["active"], secret=form.cleaned_data["secret"] or None)
        except ValidationError as e:
            for field, errors in e.message_dict.items():
                for error in errors:
                    form.add_error(field if field in form.fields else None, error)
        else:
            messages.success(request, f"Webhook {hook.url} saved.")
            return redirect("notifications:webhooks")
    return render(request, "notifications/webhook_edit.html", {"form": form, "hook": hook})


@login_required
@require_POST
def webhook_test(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    hook = get_object_or_404(services.webhooks_of(request.user), pk=pk)
    tasks.queue(services.send_test(hook))
    messages.success(request, f"A test message is on its way to {hook.url}: see Deliveries below.")
    return redirect("notifications:webhooks")


@login_required
@require_POST
def redeliver(request: AuthenticatedHttpRequest, pk: int) -> HttpResponse:
    delivery = get_object_or_404(services.deliveries_of(request.user), pk=pk)
    tasks.queue(services.redeliver(delivery))
    messages.success(request, f"The {delivery.event} message is sent again to {delivery.webhook.url}.")
    return redirect("notifications:webhooks")


@login_required
@require_POST
def email(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = EmailForm(request.POST)
    form.is_valid()  # a checkbox: absent means off
    services.set_email_on_job_end(request.user, form.cleaned_data.get("job_end", False))
    if not request.user.email:
        messages.warning(request, "Your account has no e-mail address: ask an administrator to set one.")
    return redirect("notifications:webhooks")
