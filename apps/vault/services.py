"""Writes to the vault: set, delete, rotate; and the two places values leave it: the admission
check (names only) and the claim (values, to the node that runs the job, over its credential).

A value is accepted, encrypted and forgotten: it is never returned by the API, never put in an
audit record (which says ``secret.set`` and the name) and never logged.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from apps.audit.services import audit_record
from apps.core.errors import FieldError, Forbidden, NotFound, ServiceError
from apps.tenants.models import Project
from apps.tenants.selectors import AnyUser, has_role
from apps.vault import crypto
from apps.vault.models import Secret

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
NAME_RULE = "Upper-case letters (A-Z), digits and _, starting with a letter; at most 64 characters, e.g. HF_TOKEN."
# Names the agent or the runtime sets itself: a secret must not silently replace them.
RESERVED_NAMES = frozenset({
    "PATH", "HOME", "USER", "SHELL", "PWD", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "LD_PRELOAD", "LD_LIBRARY_PATH",
    "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "CUDA_VISIBLE_DEVICES",
})
RESERVED_PREFIXES = ("TRAINYARD_", "TORCHELASTIC_", "NCCL_")
# Short values would be unsafe to redact from logs ("[redacted]" everywhere a common word appears).
MIN_VALUE_CHARS = 8
MAX_VALUE_CHARS = 16 * 1024
MAX_SECRETS_PER_PROJECT = 100
MAX_SECRETS_PER_RUN = 32


class VaultNotConfigured(ServiceError):
    """The server has no key to encrypt with (a deployment without TRAINYARD_SECRET_KEYS): the
    request was fine, the server cannot keep it, so a 503 that says what is missing, not a 500.
    `manage.py check --deploy` reports the same thing before anyone gets here."""

    status_code = 503
    code = "vault_not_configured"


def secret_name_check(*, name: Any, field: str = "name") -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise FieldError(field, "must be 1-64 characters: an uppercase letter, then uppercase letters, digits or '_' "
                                f"(got {str(name)[:80]!r})")
    if name in RESERVED_NAMES or name.startswith(RESERVED_PREFIXES):
        raise FieldError(field, f"{name} is reserved for the runtime (also reserved: names starting with "
                                f"{', '.join(RESERVED_PREFIXES)})")
    return name


def _value_check(value: Any) -> str:
    # The message names the limit and the length, never the value.
    if not isinstance(value, str):
        raise FieldError("value", "must be a string")
    if not MIN_VALUE_CHARS <= len(value) <= MAX_VALUE_CHARS:
        raise FieldError("value", f"must be {MIN_VALUE_CHARS} to {MAX_VALUE_CHARS} characters (got {len(value)})")
    if "\x00" in value:
        raise FieldError("value", "must not contain NUL characters (it becomes an environment variable)")
    return value


def _actor(user: AnyUser) -> Any:
    return user if getattr(user, "is_authenticated", False) else None


def secret_edit_check(*, user: AnyUser, project: Project) -> None:
    """Raises Forbidden unless the user is an admin of the project's team."""
    if not has_role(user=user, team_id=project.team_id, at_least="admin"):
        raise Forbidden("Only admins of the project's team may set or delete its secrets.")


def secret_set(*, project: Project, name: Any, value: Any, user: AnyUser) -> tuple[Secret, bool]:
    """Create or replace a secret; returns (secret, created)."""
    secret_edit_check(user=user, project=project)
    name = secret_name_check(name=name)
    value = _value_check(value)
    try:
        ciphertext = crypto.encrypt(value)
        key_id = crypto.key_fingerprint()
    except ImproperlyConfigured as exc:
        log.error("secret not stored: %s", exc)
        raise VaultNotConfigured("Secrets cannot be stored: this server has no encryption key configured "
                                 f"({crypto.KEYS_SETTING}). Ask its administrator to set one.") from exc
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        secret = Secret.objects.select_for_update().filter(project=locked, name=name).first()
        created = secret is None
        if secret is None:
            if Secret.objects.filter(project=locked).count() >= MAX_SECRETS_PER_PROJECT:
                raise FieldError("name", f"a project may hold at most {MAX_SECRETS_PER_PROJECT} secrets")
            secret = Secret(project=locked, name=name)
        secret.ciphertext = ciphertext
        secret.key_id = key_id
        secret.updated_by = _actor(user)
        secret.save()
        audit_record(action="secret.set", target=secret, team_id=locked.team_id, after={"name": name, "created": created},
                     actor=_actor(user))
    return secret, created


def secret_delete(*, project: Project, name: str, user: AnyUser) -> None:
    secret_edit_check(user=user, project=project)
    with transaction.atomic():
        secret = Secret.objects.select_for_update().filter(project=project, name=name).first()
        if secret is None:
            raise NotFound(f"no secret named {name[:80]!r} in this project")
        audit_record(action="secret.deleted", target=secret, team_id=project.team_id, before={"name": name}, actor=_actor(user))
        secret.delete()


def secrets_rotate() -> int:
    """Re-encrypt every secret with the newest key (idempotent); returns how many changed."""
    newest = crypto.key_fingerprint()
    changed = 0
    for pk in Secret.objects.exclude(key_id=newest).order_by("pk").values_list("pk", flat=True):
        with transaction.atomic():
            secret = Secret.objects.select_for_update().select_related("project").filter(pk=pk).first()
            if secret is None or secret.key_id == newest:
                continue
            old = secret.key_id
            secret.ciphertext = crypto.rotate(secret.ciphertext)
            secret.key_id = newest
            secret.save(update_fields=["ciphertext", "key_id", "updated_at"])
            audit_record(action="secret.rotated", target=secret, team_id=secret.project.team_id,
                         before={"name": secret.name, "key": old}, after={"name": secret.name, "key": newest})
            changed += 1
    return changed


def run_secret_names(*, run: Any) -> list[str]:
    """The secrets a run gets: those its template's environment lists plus those the run asked for."""
    template_env = getattr(run.template, "environment", None) or {}
    from_template = template_env.get("secrets") or [] if isinstance(template_env, dict) else []
    names = [*from_template, *(getattr(run, "secrets", None) or [])]
    return sorted({n for n in names if isinstance(n, str)})


def vault_admission_check(*, run: Any, project: Project, **_: Any) -> None:
    """Refuses a submission that names a malformed or absent secret (registered in ADMISSION_CHECKS)."""
    requested = getattr(run, "secrets", None) or []
    if not isinstance(requested, list) or len(requested) > MAX_SECRETS_PER_RUN:
        raise FieldError("secrets", f"must be a list of at most {MAX_SECRETS_PER_RUN} secret names")
    for name in requested:
        secret_name_check(name=name, field="secrets")
    names = run_secret_names(run=run)
    if not names:
        return
    present = set(Secret.objects.filter(project=project, name__in=names).values_list("name", flat=True))
    missing = [n for n in names if n not in present]
    if missing:
        raise FieldError("secrets", f"project {project.full_slug} has no secret named {', '.join(missing)}; "
                                    "a team admin sets it on the project's secrets page")


def run_secret_values(*, run: Any) -> dict[str, str]:
    """Decrypted values for the node that claims the run's assignment; never stored or logged."""
    names = run_secret_names(run=run)
    if not names:
        return {}
    rows = dict(Secret.objects.filter(project_id=run.project_id, name__in=names).values_list("name", "ciphertext"))
    for name in names:
        if name not in rows:
            log.warning("run %s asks for secret %s, which its project no longer has; the job starts without it", run.pk, name)
    return {name: crypto.decrypt(token) for name, token in rows.items()}
