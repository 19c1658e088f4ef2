"""User-facing nodes API: GET /api/v1/nodes/ (any signed-in user), drain/undrain (admins)."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.scoped import UnscopedAPIMixin
from apps.core.errors import FieldError
from apps.nodes.models import Node
from apps.nodes.selectors import node_overview
from apps.nodes.services import node_drain, node_undrain


class NodeListView(UnscopedAPIMixin, APIView):
    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(responses=None)
    def get(self, request: Request) -> Response:
        pools = node_overview(user=request.user)
        nodes = [n for p in pools for n in p["nodes"]]
        return Response({"pools": [{k: v for k, v in p.items() if k != "nodes"} for p in pools], "nodes": nodes})


class NodeDrainView(UnscopedAPIMixin, APIView):
    permission_classes = [permissions.IsAuthenticated]
    undrain = False

    @extend_schema(request=None, responses=None)
    def post(self, request: Request, pk: int) -> Response:
        node = get_object_or_404(Node, pk=pk)
        if self.undrain:
            node = node_undrain(node=node, user=request.user)
        else:
            deadline: Any = request.data.get("deadline_s", 0) if isinstance(request.data, dict) else 0
            if not isinstance(deadline, int) or not 0 <= deadline <= 7 * 86400:
                raise FieldError("deadline_s", "an integer from 0 to 604800 seconds")
            node = node_drain(node=node, user=request.user, deadline_s=deadline)
        return Response({"id": node.pk, "state": node.state})
