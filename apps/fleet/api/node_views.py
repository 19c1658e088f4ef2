"""User-facing nodes API: GET /api/v1/nodes/ (any signed-in user), drain/undrain (admins)."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, permissions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.core.api.listing import ordering_apply, ordering_parameter
from apps.core.errors import FieldError
from apps.fleet.api.serializers import NodeDrainSerializer, NodePageSerializer, NodeStateSerializer
from apps.fleet.selectors import node_rows, pool_summaries
from apps.nodes.models import Node, NodePool, NodeState
from apps.nodes.services import node_drain, node_undrain
from apps.tenants.api.scoped import UnscopedAPIMixin

NODE_ORDERING = {"hostname": "hostname", "last_heartbeat_at": "last_heartbeat_at", "pool": "pool__name", "state": "state",
                 "registered_at": "registered_at", "id": "id"}


class NodeListView(UnscopedAPIMixin, generics.GenericAPIView):
    """The shared fleet, a page of nodes at a time, with every pool's free devices."""

    permission_classes = [permissions.IsAuthenticated]
    serializer_class = NodePageSerializer

    def get_queryset(self) -> QuerySet[Node]:
        queryset = Node.objects.select_related("pool").prefetch_related("devices")
        params = self.request.query_params
        if params.get("pool"):
            # An unknown pool is a typo to name, as an unknown state is, not a fleet with no nodes.
            known = list(NodePool.objects.order_by("name").values_list("name", flat=True))
            if params["pool"] not in known:
                raise FieldError("pool", f"no pool {params['pool'][:40]!r} (pools: {', '.join(known) or 'none'})")
            queryset = queryset.filter(pool__name=params["pool"])
        if params.get("state"):
            if params["state"] not in NodeState.values:
                raise FieldError("state", f"one of {', '.join(NodeState.values)} (got {params['state'][:40]!r})")
            queryset = queryset.filter(state=params["state"])
        return ordering_apply(queryset, self.request, fields=NODE_ORDERING, default=["pool__name", "hostname", "id"])

    @extend_schema(
        parameters=[
            OpenApiParameter("pool", OpenApiTypes.STR, description="Only this pool's nodes."),
            OpenApiParameter("state", OpenApiTypes.STR, enum=NodeState.values, description="Only nodes in this state."),
            ordering_parameter(NODE_ORDERING, "pool,hostname"),
            OpenApiParameter("page", OpenApiTypes.INT, description="A page number within the paginated result set."),
            OpenApiParameter("page_size", OpenApiTypes.INT, description="Number of results to return per page (at most 500)."),
        ],
        responses={200: NodePageSerializer},
    )
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        assert page is not None  # the project's pagination is always on
        rows = node_rows(user=request.user, nodes=page)
        response = self.get_paginated_response(rows)
        response.data["pools"] = pool_summaries()
        response.data["nodes"] = rows  # the pre-pagination key, for older clients
        return response


class NodeDrainView(UnscopedAPIMixin, APIView):
    permission_classes = [permissions.IsAuthenticated]
    undrain = False

    @extend_schema(request=NodeDrainSerializer, responses={200: NodeStateSerializer},
                   description="Admins: drain stops new work on the node; running work may go on for deadline_s seconds. "
                               "Undrain takes no body.")
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
