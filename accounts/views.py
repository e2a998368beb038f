"""The account pages: logging in, and the user's API tokens (list and revoke)."""

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from . import services, throttle
from .forms import LoginForm


class LoginView(auth_views.LoginView):
    """Django's login page, its password checked through the brute-force throttle: a refused
    attempt gets the 429 page saying how long to wait."""

    authentication_form = LoginForm

    def form_invalid(self, form):
        if form.throttled is not None:
            return throttle.refusal(self.request, form.throttled)
        return super().form_invalid(form)


@login_required
def tokens(request):
    services.delete_expired_tokens(request.user)
    return render(request, "accounts/tokens.html", {"tokens": services.tokens_of(request.user)})


@login_required
@require_POST
def token_revoke(request, pk: int):
    token = get_object_or_404(services.tokens_of(request.user), pk=pk)
    services.revoke_token(token)
    messages.success(request, f"Token {token.name or token.pk} revoked: it no longer works.")
    return redirect("accounts:tokens")
