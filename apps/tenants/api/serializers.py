from __future__ import annotations

from rest_framework import serializers

from apps.tenants.models import Membership, Project, Team


class TeamSerializer(serializers.ModelSerializer[Team]):
    role = serializers.SerializerMethodField(help_text="Your role in this team.")

    class Meta:
        model = Team
        fields = ["id", "slug", "name", "role", "created_at"]

    def get_role(self, team: Team) -> str | None:
        roles: dict[int, str] = self.context.get("roles", {})
        return roles.get(team.pk)


class ProjectSerializer(serializers.ModelSerializer[Project]):
    team: serializers.SlugRelatedField[Team] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    full_slug = serializers.CharField(read_only=True)

    class Meta:
        model = Project
        fields = ["id", "team", "slug", "full_slug", "name", "description", "created_at"]
        read_only_fields = ["id", "created_at"]


class ProjectCreateSerializer(serializers.Serializer[Project]):
    team = serializers.SlugField(help_text="Slug of a team you administer.")
    slug = serializers.RegexField(r"^[a-z0-9][a-z0-9-]{0,62}$", max_length=63)
    name = serializers.CharField(max_length=200)
    description = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)


class ProjectUpdateSerializer(serializers.Serializer[Project]):
    name = serializers.CharField(max_length=200, required=False)
    description = serializers.CharField(required=False, allow_blank=True, max_length=5000)


class MembershipSerializer(serializers.ModelSerializer[Membership]):
    user = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = Membership
        fields = ["id", "user", "role"]
