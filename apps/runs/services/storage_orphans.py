"""Objects in the store that no row points at: the bytes of a direct upload whose confirmation
never came (the agent died, the confirm failed). They cost storage and no page shows them.

Only prefixes some app has registered are looked at, each with the function that says which of
a batch of keys its rows still reference: checkpoints (here) and artifacts (apps.artifacts
registers in its AppConfig.ready). An object is an orphan when no registered function claims it
and it is older than the grace period (TRAINYARD_ORPHAN_GRACE_S, and never less than the time
an upload may still be confirmed), so an upload in progress is never touched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from apps.audit.services import audit_record
from apps.core.storage import StoredObject, store
from apps.runs.models import Checkpoint
from apps.runs.services.checkpoints import checkpoint_key

log = logging.getLogger(__name__)
BATCH = 500

# prefix -> (keys -> those of them some row references)
Referenced = Callable[[list[str]], set[str]]
STORAGE_REFERENCES: dict[str, Referenced] = {}


def storage_references_register(*, prefix: str, referenced: Referenced) -> None:
    """Let the sweep look under `prefix`; `referenced` names which keys of a batch are in use."""
    if not prefix.endswith("/"):
        raise ValueError(f"a storage prefix is a folder ending in '/', not {prefix!r}")
    STORAGE_REFERENCES[prefix] = referenced


@dataclass(frozen=True)
class Orphan:
    key: str
    size: int
    age_s: float


@dataclass
class OrphanSweep:
    grace_s: float
    deleted: bool
    orphans: list[Orphan] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.orphans)

    @property
    def bytes(self) -> int:
        return sum(o.size for o in self.orphans)


def orphan_grace_s(older_than: timedelta | None = None) -> float:
    """`older_than`, else TRAINYARD_ORPHAN_GRACE_S, raised to the longest an upload may still be
    confirmed: an artifact's upload token lasts twice the presigned URLs' TTL (apps.artifacts.services)."""
    wanted = older_than.total_seconds() if older_than is not None else float(settings.TRAINYARD_ORPHAN_GRACE_S)
    return max(wanted, 2.0 * float(settings.TRAINYARD_STORAGE_URL_TTL_S))


def storage_orphans_find(*, older_than: timedelta | None = None, now: datetime | None = None) -> list[Orphan]:
    """The unreferenced objects under the registered prefixes last changed before now - grace."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=orphan_grace_s(older_than))
    objects = store()
    found: list[Orphan] = []
    for prefix, referenced in sorted(STORAGE_REFERENCES.items()):
        old = (o for o in objects.objects(prefix=prefix) if o.modified < cutoff)
        for batch in _batches(old, BATCH):
            used = referenced([o.key for o in batch])
            found.extend(Orphan(key=o.key, size=o.size, age_s=(now - o.modified).total_seconds())
                         for o in batch if o.key not in used)
    return sorted(found, key=lambda o: o.key)


def storage_orphans_sweep(*, delete: bool, older_than: timedelta | None = None, now: datetime | None = None,
                          actor_label: str = "") -> OrphanSweep:
    """Find the orphans and, unless a dry run, delete them, with one audit event for the sweep
    (count and bytes). Idempotent: a second sweep finds nothing, and records nothing."""
    grace_s = orphan_grace_s(older_than)
    sweep = OrphanSweep(grace_s=grace_s, deleted=delete,
                        orphans=storage_orphans_find(older_than=timedelta(seconds=grace_s), now=now))
    if not delete or not sweep.orphans:
        return sweep
    objects = store()
    gone: list[Orphan] = []
    for orphan in sweep.orphans:
        try:
            objects.delete(orphan.key)
        except Exception:  # one object the store refuses must not stop the rest; the next sweep retries
            log.exception("storage orphan %s: delete failed", orphan.key)
            continue
        gone.append(orphan)
    sweep.orphans = gone
    if gone:
        log.info("deleted %d orphaned objects (%d bytes) from the store", sweep.count, sweep.bytes)
        audit_record(action="storage.orphans_deleted", object_type="storage", object_id="orphans",
                     actor_label=actor_label or "system:storage-orphans",
                     after={"count": sweep.count, "bytes": sweep.bytes, "grace_s": grace_s,
                            "keys": [o.key for o in gone[:50]]})
    return sweep


def checkpoint_keys_referenced(keys: list[str]) -> set[str]:
    """Keys a checkpoint row stands for: a stored one's, and a pending one's (its upload may be
    confirmed or retried). A row that retention removed before its upload was checked keeps none."""
    used = set(Checkpoint.objects.filter(stored_path__in=keys).values_list("stored_path", flat=True))
    run_ids = {int(part) for key in keys if (part := key.split("/")[1] if key.count("/") >= 2 else "").isdigit()}
    pending = Checkpoint.objects.filter(run_id__in=run_ids, stored_path="", deleted_at__isnull=True)
    wanted = set(keys)
    used.update(k for ckpt in pending if (k := checkpoint_key(checkpoint=ckpt)) in wanted)
    return used


def _batches(items: Iterable[StoredObject], size: int) -> Iterable[list[StoredObject]]:
    batch: list[StoredObject] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


storage_references_register(prefix="checkpoints/", referenced=checkpoint_keys_referenced)
