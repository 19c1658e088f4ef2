"""Admin for node pools, nodes, devices and join tokens.

Nodes and devices are what agents report: read-only here. Admins change a node's state only
through actions that call the services (drain, undrain), so each change is checked and
audited like the same change made from the Nodes page or the API. Join tokens are made per
pool; only their hash is stored and the plaintext is shown once, in a message after creation.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from apps.audit.context import acting_as
from apps.audit.middleware import client_ip
from apps.core.errors import ServiceError
from apps.nodes import services
from apps.nodes.models import Device, JoinToken, Node, NodePool

MAX_TTL_HOURS = 24 * 365
# What an administrator needs beside the JSON box: its options are the scheduler's (checked on save).
POLICY_HELP = ('Scheduler options as JSON; {} for the defaults. For example {"demote_after_s": 7200, '
               '"max_preemptions": 10}. Every option, its default and what it does: docs/pool-policy.md. '
               'The rules in force: the queue page, "How this pool decides who goes next".')


def _act(request: HttpRequest) -> AbstractContextManager[None]:
    return acting_as(user=request.user, ip=client_ip(request))


@admin.register(NodePool)
class NodePoolAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "price_per_device_hour", "carbon_g_per_kwh", "node_count", "created_at"]
    search_fields = ["name", "description"]

    @admin.display(description="nodes")
    def node_count(self, obj: NodePool) -> int:
        return obj.nodes.count()

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "policy" and field is not None:
            field.help_text = POLICY_HELP
        return field

    def get_readonly_fields(self, request: HttpRequest, obj: NodePool | None = None) -> list[str]:
        # A price change is a new dated price (Billing > Pool prices), never an edit of the list price.
        return ["price_per_device_hour", "created_at"] if obj is not None else ["created_at"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # runs and nodes keep their pool; retire a pool by draining its nodes

    def save_model(self, request: HttpRequest, obj: NodePool, form: Any, change: bool) -> None:
        with _act(request):
            services.pool_save(pool=obj)


class DeviceInline(admin.TabularInline):
    model = Device
    extra = 0
    can_delete = False
    fields = ("index", "kind", "model", "uuid", "memory_bytes", "utilization", "power_w")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    """What the agents reported; state changes only through the drain / undrain actions."""

    list_display = ["hostname", "pool", "state", "address", "last_heartbeat_at", "drain_deadline", "agent_version", "session"]
    list_filter = ["pool", "state"]
    search_fields = ["hostname", "address", "agent_uid"]
    exclude = ["credential_hash"]
    inlines = [DeviceInline]
    actions = ["drain", "drain_with_deadline", "undrain"]

    def get_readonly_fields(self, request: HttpRequest, obj: Node | None = None) -> list[str]:
        return [f.name for f in Node._meta.fields if f.name != "credential_hash"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # nodes join with a join token

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Every field is what the agent reported: a node's page is for reading. Its Save wrote the
        # whole row back, state included, outside the audited services (a concurrent heartbeat or
        # sweep could lose its state change to it, unrecorded).
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # their placements refer to them; a retired node simply stays offline

    def _each(self, request: HttpRequest, queryset: QuerySet[Node], verb: str, **kwargs: Any) -> None:
        done = 0
        for node in queryset:
            try:
                with _act(request):
                    if verb == "undrain":
                        services.node_undrain(node=node, user=request.user)
                    else:
                        services.node_drain(node=node, user=request.user, **kwargs)
                done += 1
            except ServiceError as err:
                self.message_user(request, f"Node {node.hostname}: {err}", messages.WARNING)
        if done:
            self.message_user(request, f"{verb.capitalize()}: {done} node(s)", messages.SUCCESS)

    @admin.action(description="Drain: no new work; running attempts may finish")
    def drain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        self._each(request, queryset, "drain", deadline_s=0)

    @admin.action(description="Drain: preempt running attempts (checkpoint, requeue) after 10 minutes")
    def drain_with_deadline(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        self._each(request, queryset, "drain", deadline_s=600)

    @admin.action(description="Undrain: accept new work again")
    def undrain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        self._each(request, queryset, "undrain")


@admin.register(Device)
class DeviceAdmin(admin.ModelAdmin):
    list_display = ["__str__", "node", "kind", "model", "memory_bytes", "utilization", "power_w"]
    list_filter = ["kind", "node__pool"]
    search_fields = ["node__hostname", "model", "uuid"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class JoinTokenForm(forms.ModelForm):
    ttl_hours = forms.FloatField(initial=24, min_value=0, max_value=MAX_TTL_HOURS, label="Valid for (hours)",
                                 help_text="0 = never expires.")

    class Meta:
        model = JoinToken
        fields = ["pool", "name"]


@admin.register(JoinToken)
class JoinTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "pool", "name", "status", "created_at", "expires_at", "revoked_at"]
    list_filter = ["pool"]
    search_fields = ["name", "prefix"]
    actions = ["revoke"]

    @admin.display(description="status")
    def status(self, obj: JoinToken) -> str:
        if obj.revoked_at is not None:
            return "revoked"
        if obj.expires_at is not None and obj.expires_at < timezone.now():
            return "expired"
        return "active"

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = JoinTokenForm
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request: HttpRequest, obj: JoinToken | None = None) -> list[str]:  # type: ignore[override]
        if obj is None:
            return ["pool", "name", "ttl_hours"]
        return ["pool", "name", "prefix", "status", "created_at", "expires_at", "revoked_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: JoinToken | None = None) -> list[str]:
        return self.get_fields(request, obj) if obj is not None else []

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # revoke instead: the record (and its audit trail) stays

    def save_model(self, request: HttpRequest, obj: JoinToken, form: Any, change: bool) -> None:
        if change:
            return  # every field is read-only once made
        ttl = form.cleaned_data.get("ttl_hours") or None
        with _act(request):
            token, secret = services.join_token_create(pool=obj.pool, name=obj.name, ttl_hours=ttl)
        obj.pk = token.pk
        obj.prefix, obj.token_hash, obj.expires_at, obj.created_at = token.prefix, token.token_hash, token.expires_at, token.created_at
        self.message_user(request, f"Join token for pool {obj.pool.name}: {secret} (copy it now: it is shown only this once). "
                                   f"Start an agent with: python -m agents --server URL --join-token {secret} --pool {obj.pool.name}",
                          messages.SUCCESS)

    @admin.action(description="Revoke selected join tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[JoinToken]) -> None:
        count = 0
        for token in queryset.filter(revoked_at__isnull=True):
            with _act(request):
                services.join_token_revoke(token=token)
            count += 1
        self.message_user(request, f"Revoked {count} join token(s)", messages.SUCCESS)
