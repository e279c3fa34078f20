"""The kernel's pages: the login page, a user's API tokens, and the answer to a locked-out
login."""

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST
from knox.models import AuthToken

from projects.forms import TokenForm
from projects.tokens import token_default_days, token_issue, token_max_days
from projects.tokens import token_revoke as token_revoke_service


class LoginView(auth_views.LoginView):
    """The password form, unless ``FACTORY_PASSWORD_LOGIN`` is off, and the single sign-on
    button when it is configured. With passwords off a posted form is refused (403) before
    any password is checked, so it neither signs in nor counts towards a lockout."""

    redirect_authenticated_user = True

    def post(self, request, *args, **kwargs):
        if not settings.FACTORY_PASSWORD_LOGIN:
            context = self.get_context_data(refused=True)
            return self.render_to_response(context, status=403)
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs):
        return super().get_context_data(
            password_login=settings.FACTORY_PASSWORD_LOGIN,
            sso_name=settings.FACTORY_OIDC_PROVIDER_NAME if settings.FACTORY_OIDC_ENABLED else "",
            sso_failed=settings.FACTORY_OIDC_ENABLED and self.request.GET.get("sso") == "failed",
            **kwargs,
        )


@login_required
@never_cache
def tokens(request):
    """The user's API tokens: issue one (shown once), or revoke.

    Never cached (``no-store``): the answer to an issue shows the token itself.
    """
    created = None
    if request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            try:
                _, created = token_issue(user=request.user, days=form.cleaned_data["days"])
            except ValidationError as exc:
                form.add_error(None, exc)
            else:
                messages.success(request, "Token issued. Copy it now: it is not shown again.")
    else:
        form = TokenForm(initial={"days": token_default_days(request.user)})
    rows = AuthToken.objects.filter(user=request.user).order_by("-created")
    response = render(
        request,
        "projects/tokens.html",
        {
            "form": form,
            "rows": rows,
            "created": created,
            "nav": "tokens",
            "max_days": token_max_days(request.user),
            "cap": settings.FACTORY_TOKEN_MAX_PER_USER,
        },
    )
    response["Pragma"] = "no-cache"  # HTTP/1.0 caches ignore Cache-Control
    return response


@login_required
@require_POST
def token_revoke(request):
    if token_revoke_service(user=request.user, token_key=request.POST.get("token_key", "")):
        messages.success(request, "Token revoked.")
    else:
        messages.error(request, "No such token.")
    return redirect(reverse("tokens"))


def locked_out(request, original_response=None, credentials=None):
    """django-axes' answer to a refused login: when the lock ends and who can end it sooner.

    The wait restarts with every failed try (axes' default), so it is counted from now.
    """
    minutes = int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)
    context = {
        "minutes": minutes,
        "until": timezone.now() + settings.AXES_COOLOFF_TIME,
        "limit": settings.AXES_FAILURE_LIMIT,
    }
    return render(request, "registration/locked_out.html", context, status=429)
