"""Writes for environment lineage: the record an agent sends once per attempt and node (POST
/api/v1/agent/lineage/), immutable once stored. Packages are kept once per distinct set."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from apps.core.errors import Conflict, FieldError
from apps.runs.models import Assignment, Attempt
from apps.tracking.models import AttemptEnvironment, PackageSet

MAX_PACKAGES = 5000
MAX_PACKAGE_CHARS = 200
MAX_ENVIRONMENT_CHARS = 100_000
SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class EnvironmentReport:
    node_rank: int
    environment: dict[str, Any]
    packages: tuple[str, ...]  # sorted
    packages_sha256: str


def packages_digest(packages: tuple[str, ...] | list[str]) -> str:
    return hashlib.sha256("\n".join(packages).encode()).hexdigest()


def environment_report_parse(*, data: Any) -> EnvironmentReport:
    """A lineage report's body, bounded and checked, or a FieldError naming what is wrong."""
    if not isinstance(data, dict):
        raise FieldError("body", "a JSON object")
    rank = data.get("node_rank")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank <= 100_000:
        raise FieldError("node_rank", "an integer from 0 to 100000")
    environment = data.get("environment")
    if not isinstance(environment, dict):
        raise FieldError("environment", "an object")
    try:
        size = len(json.dumps(environment, allow_nan=False, separators=(",", ":")))
    except ValueError:
        raise FieldError("environment", "JSON without NaN or infinite numbers") from None
    if size > MAX_ENVIRONMENT_CHARS:
        raise FieldError("environment", f"{size} characters as JSON; the limit is {MAX_ENVIRONMENT_CHARS}")
    packages = data.get("packages")
    if not isinstance(packages, list):
        raise FieldError("packages", 'a list of "name==version" strings')
    if len(packages) > MAX_PACKAGES:
        raise FieldError("packages", f"{len(packages)} entries; the limit is {MAX_PACKAGES}")
    for i, item in enumerate(packages):
        if not isinstance(item, str) or not 0 < len(item) <= MAX_PACKAGE_CHARS or "\n" in item or "\x00" in item:
            raise FieldError(f"packages[{i}]", f"a one-line string of 1 to {MAX_PACKAGE_CHARS} characters")
    canonical = tuple(sorted(packages))
    digest = data.get("packages_sha256")
    if not isinstance(digest, str) or not SHA256.match(digest):
        raise FieldError("packages_sha256", "64 lowercase hex digits")
    if packages_digest(canonical) != digest:
        raise FieldError("packages_sha256", "is not the sha256 of the sorted packages joined with newlines")
    return EnvironmentReport(node_rank=rank, environment=environment, packages=canonical, packages_sha256=digest)


def _same(record: AttemptEnvironment, report: EnvironmentReport) -> bool:
    return record.package_set.sha256 == report.packages_sha256 and record.environment == report.environment


def attempt_environment_record(*, attempt: Attempt, node_id: int, hostname: str,
                               report: EnvironmentReport) -> tuple[AttemptEnvironment, bool]:
    """Store the environment `node_id` ran its rank of `attempt` in; (record, created).

    The first report for an attempt and rank stands: the same one again (an agent's replay) is
    answered with the stored record, a different one is a Conflict and changes nothing.
    """
    if not Assignment.objects.filter(attempt=attempt, node_id=node_id, node_rank=report.node_rank).exists():
        raise FieldError("node_rank", f"this node does not hold rank {report.node_rank} of attempt {attempt.pk}")
    with transaction.atomic():
        existing = AttemptEnvironment.objects.select_related("package_set").filter(attempt=attempt, node_rank=report.node_rank).first()
        if existing is None:
            package_set, _ = PackageSet.objects.get_or_create(sha256=report.packages_sha256,
                                                              defaults={"packages": list(report.packages)})
            try:
                with transaction.atomic():
                    record = AttemptEnvironment.objects.create(attempt=attempt, node_rank=report.node_rank, hostname=hostname[:253],
                                                               environment=report.environment, package_set=package_set)
                return record, True
            except IntegrityError:
                # Another request stored this attempt's rank between the read and the insert.
                existing = AttemptEnvironment.objects.select_related("package_set").get(attempt=attempt, node_rank=report.node_rank)
        if not _same(existing, report):
            raise Conflict(f"attempt {attempt.number} of run {attempt.run_id}, rank {report.node_rank}, already has its lineage "
                           f"(recorded {existing.created_at.isoformat()}); lineage is immutable, so this different report was refused",
                           code="lineage_immutable")
        return existing, False
