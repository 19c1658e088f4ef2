from __future__ import annotations

from django.db.models import QuerySet
from rest_framework import permissions, serializers, viewsets

from apps.audit.models import AuditEvent
from apps.core.api.listing import LIST_BACKENDS


class AuditEventSerializer(serializers.ModelSerializer[AuditEvent]):
    actor = serializers.CharField(source="actor_label")

    class Meta:
        model = AuditEvent
        fields = ["id", "at", "actor", "action", "object_type", "object_id", "object_repr", "team_id", "before", "after", "ip"]


class AuditEventViewSet(viewsets.ReadOnlyModelViewSet):
    """The audit log, for administrators only. Filters: action, object_type, object_id, actor."""

    permission_classes = [permissions.IsAdminUser]
    serializer_class = AuditEventSerializer
    filter_backends = LIST_BACKENDS
    ordering_fields = ["at", "action", "object_type", "id"]
    ordering = ["-at", "-id"]

    def get_queryset(self) -> QuerySet[AuditEvent]:
        qs = AuditEvent.objects.all()
        params = self.request.query_params
        for field in ("action", "object_type", "object_id"):
            if params.get(field):
                qs = qs.filter(**{field: params[field]})
        if params.get("actor"):
            qs = qs.filter(actor_label=params["actor"])
        return qs
