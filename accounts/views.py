"""The account pages: logging in, and the user's API tokens (make a named one, list with last
use, revoke)."""

from typing import Any

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from . import services, throttle
from .current import signed_in
from .forms import LoginForm


class LoginView(auth_views.LoginView):
    """Django's login page, its password checked through the brute-force throttle: a refused
    attempt gets the 429 page saying how long to wait."""

    authentication_form = LoginForm

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        if isinstance(form, LoginForm) and form.throttled is not None:  # it always is a LoginForm
            return throttle.refusal(self.request, form.throttled)
        return super().form_invalid(form)


@login_required
def tokens(request: HttpRequest) -> HttpResponse:
    """The list; a POST makes a named token and shows its secret on this answer only."""
    user = signed_in(request)
    services.delete_expired_tokens(user)
    context: dict[str, Any] = {"name_error": "", "new_secret": ""}
    if request.method == "POST":
        try:
            info, secret = services.create_named_token(user, name=request.POST.get("name", ""),
                                                       never_expires=request.POST.get("never_expires") == "1")
        except ValidationError as e:
            context["name_error"] = " ".join(e.message_dict.get("name", e.messages))
            context["name"] = request.POST.get("name", "")[:64]
        else:
            context.update(new_secret=secret, new_token=info)
    return render(request, "accounts/tokens.html", {**context, "tokens": services.tokens_of(user)},
                  status=400 if context["name_error"] else 200)


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(services.tokens_of(signed_in(request)), pk=pk)
    services.revoke_token(token)
    messages.success(request, f"Token {token.name or token.pk} revoked: it no longer works.")
    return redirect("accounts:tokens")
