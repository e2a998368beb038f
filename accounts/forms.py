"""The login forms of the page and the admin, checking passwords through the brute-force
throttle (accounts.throttle.check_password) instead of calling authenticate() themselves."""

from typing import Any

from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from . import throttle


class _ThrottledLogin(AuthenticationForm):
    throttled: throttle.LoginThrottled | None = None  # why the login was refused unchecked, if it was
    request: HttpRequest  # both login views pass theirs (the throttle counts by its address)

    def clean(self) -> dict[str, Any]:
        username, password = self.cleaned_data.get("username"), self.cleaned_data.get("password")
        if username is not None and password:
            try:
                self.user_cache = throttle.check_password(self.request, username, password)
            except throttle.LoginThrottled as e:
                self.throttled = e
                raise ValidationError(str(e), code="throttled") from None
            except ValidationError:
                raise self.get_invalid_login_error() from None
            self.confirm_login_allowed(self.user_cache)
        return self.cleaned_data


class LoginForm(_ThrottledLogin):
    pass


class AdminLoginForm(_ThrottledLogin, AdminAuthenticationForm):
    pass
