"""Agent authentication: `Authorization: Node <credential>`.

Node credentials start with "tyn_" and user tokens with "ty_": the two authentication classes
accept only their own kind, and agent views list only NodeAuthentication, so neither credential
can stand in for the other.
"""

from __future__ import annotations

import hashlib
from typing import Any

from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request
from rest_framework.views import APIView

from apps.nodes.models import Node

NODE_CREDENTIAL_PREFIX = "tyn_"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class AgentPrincipal:
    """Stands in for request.user on agent requests: authenticated, but no user and no staff."""

    is_authenticated = True
    is_active = True
    is_staff = False
    is_superuser = False
    pk = None

    def __init__(self, node: Node) -> None:
        self.node = node

    def get_username(self) -> str:
        return f"agent:{self.node.hostname}"

    def __str__(self) -> str:
        return self.get_username()


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
        # Every agent request comes through here: a plain statement costs a fraction of the
        # ORM's query building (the pool is read only where needed, by the rare paths that use it).
        found = Node.objects.raw(f"SELECT * FROM {Node._meta.db_table} WHERE credential_hash = %s", [hash_secret(secret)])
        node = next(iter(found), None)
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
