"""Agent authentication: `Authorization: Node <credential>`.

Node credentials start with "tyn_" and user tokens with "ty_": the two authentication classes
accept only their own kind, and agent views list only NodeAuthentication, so neither credential
can stand in for the other.
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request
from rest_framework.views import APIView

from apps.nodes.models import Node

NODE_CREDENTIAL_PREFIX = "tyn_"

# Heartbeats (every node, every 5 s) take their node from this process's cache of the rows that
# authenticated lately, instead of a query each. The snapshot is never trusted on its own: the
# heartbeat's UPDATE is fenced on the row's id, credential, session, state and device health as
# the snapshot has them (apps.nodes.services.node_heartbeat_quick), and any miss forgets the entry
# and redoes the request from a fresh lookup. So a revoked credential (re-registration, a Slurm
# node retired), a drained node or a new session is seen by the very next heartbeat, not after
# the TTL; the TTL only bounds how long a snapshot's other fields (hostname) may be old.
# Every other agent endpoint reads the row afresh.
CREDENTIAL_CACHE_S = 60.0
CREDENTIAL_CACHE_MAX = 50_000
_cache: dict[str, tuple[float, Node]] = {}
_cache_lock = threading.Lock()


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class AgentPrincipal:
    """Stands in for request.user on agent requests: authenticated, but no user and no staff."""

    is_authenticated = True
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None

    def __init__(self, node: Node, *, cached: bool = False) -> None:
        self.node = node
        self.cached = cached  # the node is a snapshot from the credential cache (see CREDENTIAL_CACHE_S)

    def get_username(self) -> str:
        return f"agent:{self.node.hostname}"

    def __str__(self) -> str:
        return self.get_username()


def node_cache_get(credential_hash: str) -> Node | None:
    """The node this process last authenticated with this credential, if within CREDENTIAL_CACHE_S."""
    entry = _cache.get(credential_hash)
    if entry is None or time.monotonic() - entry[0] > CREDENTIAL_CACHE_S:
        return None
    return entry[1]


def node_cache_put(credential_hash: str, node: Node) -> None:
    with _cache_lock:
        if len(_cache) >= CREDENTIAL_CACHE_MAX:
            _cache.clear()  # nodes come and go: start again rather than grow without bound
        _cache[credential_hash] = (time.monotonic(), node)


def node_cache_forget(credential_hash: str | None) -> None:
    if credential_hash:
        with _cache_lock:
            _cache.pop(credential_hash, None)


def node_by_credential(credential_hash: str) -> Node | None:
    """The node row for a credential hash, read afresh (and remembered for heartbeats)."""
    # Every agent request comes through here: a plain statement costs a fraction of the
    # ORM's query building (the pool is read only where needed, by the rare paths that use it).
    found = Node.objects.raw(f"SELECT * FROM {Node._meta.db_table} WHERE credential_hash = %s", [credential_hash])
    node = next(iter(found), None)
    if node is None:
        node_cache_forget(credential_hash)
    else:
        node_cache_put(credential_hash, node)
    return node


class NodeAuthentication(authentication.BaseAuthentication):
    keyword = "Node"

    def authenticate(self, request: Request) -> tuple[AgentPrincipal, Node] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid header: expected 'Node <credential>'.")
        secret = header[1].decode(errors="replace")
        if not secret.startswith(NODE_CREDENTIAL_PREFIX):
            raise exceptions.AuthenticationFailed("Not a node credential.")
        hashed = hash_secret(secret)
        # A snapshot from the credential cache will do only for views that say so (heartbeat and
        # claim: their writes are fenced on it and redone from a fresh lookup when the fence misses).
        # A view attribute, not a subclass: one class keeps one scheme in the OpenAPI schema.
        if getattr(request.parser_context.get("view"), "node_credential_cache", False):
            cached = node_cache_get(hashed)
            if cached is not None:
                return AgentPrincipal(cached, cached=True), cached
        node = node_by_credential(hashed)
        if node is None:
            raise exceptions.AuthenticationFailed("Unknown or revoked node credential.")
        return AgentPrincipal(node), node

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class IsNode(permissions.BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.auth, Node)


class AgentAPIView(APIView):
    """Base for every /api/v1/agent/ endpoint: node credentials only."""

    authentication_classes = [NodeAuthentication]
    permission_classes = [IsNode]

    @property
    def node(self) -> Node:
        assert isinstance(self.request.auth, Node)
        return self.request.auth
