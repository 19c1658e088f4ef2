from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User


def signed_in_user(request: Any) -> User:
    """request.user for views that already require login; narrows the type for the checker."""
    user = request.user
    if not isinstance(user, User) or not user.is_authenticated:
        raise PermissionError("this view requires a signed-in user")
    return user
