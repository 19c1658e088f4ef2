from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import serializers

from apps.artifacts.models import Artifact


def artifact_url(artifact: Artifact) -> str:
    return reverse("run-artifact-file", kwargs={"pk": artifact.run_id, "name": artifact.name})


class ArtifactSerializer(serializers.ModelSerializer[Artifact]):
    url = serializers.SerializerMethodField(help_text="Where to download the file (session or token auth).")

    class Meta:
        model = Artifact
        fields = ["name", "size", "sha256", "content_type", "url", "created_at", "updated_at"]

    def get_url(self, obj: Artifact) -> str:
        request: Any = self.context.get("request")
        url = artifact_url(obj)
        return request.build_absolute_uri(url) if request is not None else url


class ArtifactUploadSerializer(serializers.Serializer[Any]):
    file = serializers.FileField(allow_empty_file=True, help_text="The file's bytes (multipart).")
    name = serializers.CharField(required=False, allow_blank=True, trim_whitespace=False,
                                 help_text="Relative path inside the run, such as plots/loss.png (default: the file's name).")
    content_type = serializers.CharField(required=False, allow_blank=True,
                                         help_text="Media type (default: the upload's, else guessed from the name).")


class ArtifactPageSerializer(serializers.Serializer[Any]):
    count = serializers.IntegerField()
    next = serializers.CharField(allow_null=True)
    previous = serializers.CharField(allow_null=True)
    results = ArtifactSerializer(many=True)
