from __future__ import annotations

from django.contrib import admin

from apps.slurm.models import SlurmJob, SlurmPool


@admin.register(SlurmPool)
class SlurmPoolAdmin(admin.ModelAdmin):
    list_display = ("pool", "partition", "device_mode", "server_url")


@admin.register(SlurmJob)
class SlurmJobAdmin(admin.ModelAdmin):
    list_display = ("job_id", "run", "state", "reason", "restarts", "exit_code", "submitted_at", "finished_at")
    readonly_fields = [f.name for f in SlurmJob._meta.fields]

    def has_add_permission(self, request: object) -> bool:
        return False
