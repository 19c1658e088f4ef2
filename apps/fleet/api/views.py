"""The agent protocol endpoints (/api/v1/agent/). Message shapes: agents/protocol.py.

Views parse and bound the input, run the fencing check, and call the services of the app that
owns the rows: node sessions (apps.fleet.services), attempt events, logs, energy, progress
and checkpoints (apps.runs.services); metrics are apps.tracking's own endpoint. Replays are
idempotent through unique constraints (bulk_create ignore_conflicts = ON CONFLICT DO NOTHING).
"""

from __future__ import annotations

import math
import re
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import Any

from django.http import FileResponse
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from agents import protocol
from apps.audit.context import acting_as
from apps.core.errors import FieldError, NotFound
from apps.core.storage import ObjectMissing
from apps.core.storage_views import no_store
from apps.fleet.api.fields import int_field
from apps.fleet.services import (
    claim_answer,
    claim_wait_s,
    node_claim_wait,
    node_claim_wait_from_snapshot,
    node_heartbeat,
    node_heartbeat_from_snapshot,
    node_register,
)
from apps.nodes.auth import AgentAPIView, AgentPrincipal, node_by_credential, node_cache_forget
from apps.nodes.models import Node
from apps.nodes.services import HEARTBEAT_INTERVAL_S
from apps.runs.models import Attempt, Checkpoint
from apps.runs.selectors import attempt_for_node_report
from apps.runs.services import lifecycle
from apps.runs.services.checkpoints import (
    checkpoint_download_url,
    checkpoint_for_node,
    checkpoint_mark_deleted,
    checkpoint_open,
    checkpoint_report,
    checkpoint_store_stream,
    checkpoint_upload_complete,
    checkpoint_upload_plan,
)
from apps.runs.services.reports import (
    EnergyReading,
    LogLine,
    attempt_energy_record,
    attempt_logs_record,
    attempt_progress_record,
)

FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,200}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _list(data: Any, field: str, limit: int) -> list[Any]:
    value = data.get(field) if isinstance(data, dict) else None
    if not isinstance(value, list) or len(value) > limit:
        raise FieldError(field, f"a list of at most {limit} items")
    return value


def _body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise FieldError("body", "a JSON object")
    return request.data


def _report(view: AgentAPIView, data: Any, *, allow_finished: bool = True) -> Attempt:
    attempt_id = int_field(data, "attempt_id", minimum=1)
    number = int_field(data, "number", minimum=1, maximum=1_000_000)
    return attempt_for_node_report(node_id=view.node.pk, attempt_id=attempt_id, number=number, allow_finished=allow_finished)


class AgentView(AgentAPIView):
    """Agent endpoints audit as "agent:<host>"; the node is known only once authenticated."""

    _actor: AbstractContextManager[None] | None = None

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        self._actor = acting_as(label=f"agent:{self.node.hostname}")
        self._actor.__enter__()

    def finalize_response(self, request: Request, response: Any, *args: Any, **kwargs: Any) -> Any:
        actor = getattr(self, "_actor", None)
        if actor is not None:
            actor.__exit__(None, None, None)
            self._actor = None
        return super().finalize_response(request, response, *args, **kwargs)


class RegisterView(AgentAPIView):
    """Join token in, node credential out; an agent with a stored credential re-registers with it."""

    permission_classes = [AllowAny]

    @extend_schema(request=None, responses=None)
    def post(self, request: Request) -> Response:
        node = request.auth if isinstance(request.auth, Node) else None
        node, credential, kill = node_register(data=_body(request), node=node)
        body: protocol.RegisterResponse = {"node_id": node.pk, "credential": credential, "session": node.session,
                                           "heartbeat_interval_s": HEARTBEAT_INTERVAL_S, "kill": kill, "pool": node.pool.name}
        return Response(body, status=201 if credential else 200)



class HeartbeatView(AgentView):
    """The usual heartbeat comes from a node the credential cache knows and is recorded from that
    snapshot, fenced (node_heartbeat_from_snapshot); anything else, or a fence that misses (a
    revoked credential, a drain, a new session, health news), is redone with the row read afresh."""

    node_credential_cache = True
    renderer_classes = [JSONRenderer]  # agents read JSON only: no browsable API to negotiate

    @extend_schema(request=None, responses=None)
    def post(self, request: Request) -> Response:
        data = _body(request)
        int_field(data, "session")
        node = self.node
        if isinstance(request.user, AgentPrincipal) and request.user.cached:
            answer = node_heartbeat_from_snapshot(node=node, data=data)
            if answer is not None:
                return Response(answer)
            node = _refresh(node)
        return Response(node_heartbeat(node=node, data=data))


def _refresh(node: Node) -> Node:
    """The node of a cached snapshot that did not hold, read afresh by its credential; a 401 if
    the credential is no longer any node's."""
    node_cache_forget(node.credential_hash)
    fresh = node_by_credential(node.credential_hash) if node.credential_hash else None
    if fresh is None:
        raise AuthenticationFailed("Unknown or revoked node credential.")
    return fresh


class ClaimView(AgentView):
    """Long poll: answers as soon as an assignment is pending, or after wait_s with none.

    The wait is on Redis, not the database (node_claim_wait); a draining (or lost) node gets
    nothing and an answer at once, so a stopping agent need not wait out the poll.
    """

    node_credential_cache = True
    renderer_classes = [JSONRenderer]  # agents read JSON only: no browsable API to negotiate

    @extend_schema(request=None, responses=None)
    def post(self, request: Request) -> Response:
        data = _body(request)
        wait = claim_wait_s(data)
        if wait is None:
            raise FieldError("wait_s", f"a number from 0 to {protocol.MAX_CLAIM_WAIT_S}")
        # Checked as HeartbeatView does: `true` would otherwise pass as session 1.
        node, session, answer = self.node, int_field(data, "session"), None
        if isinstance(request.user, AgentPrincipal) and request.user.cached:
            answer = node_claim_wait_from_snapshot(node=node, session=session, wait_s=wait)
            if answer is None:
                node = _refresh(node)  # the credential changed under the snapshot: a 401 unless found afresh
        found, node = answer or node_claim_wait(node=node, session=session, wait_s=wait)
        status, body = claim_answer(found=found, node=node, session=session)
        return Response(body, status=status)


class EventView(AgentView):
    @extend_schema(request=None, responses=None)
    def post(self, request: Request) -> Response:
        data = _body(request)
        attempt = _report(self, data)
        rank = int_field(data, "node_rank", maximum=100_000)
        event = data.get("event")
        if event == "started":
            resumed = data.get("resumed_from_step")
            if resumed is not None:
                resumed = int_field(data, "resumed_from_step")
            lifecycle.assignment_started(attempt_id=attempt.pk, node_id=self.node.pk, node_rank=rank, resumed_from_step=resumed)
        elif event == "exited":
            code = data.get("exit_code")
            sig = data.get("signal")
            stop_kind = data.get("stop_kind") or None
            if stop_kind not in (None, "cancel", "preempt", "drain", "abort", lifecycle.MAX_RUNTIME):
                raise FieldError("stop_kind", "one of cancel, preempt, drain, abort, max_runtime")
            failed = data.get("failed_rank")
            lifecycle.assignment_exited(attempt_id=attempt.pk, node_id=self.node.pk, node_rank=rank,
                                        exit_code=code if isinstance(code, int) else None,
                                        signal=sig if isinstance(sig, int) else None, stop_kind=stop_kind,
                                        log_tail=str(data.get("log_tail", ""))[-lifecycle.LOG_TAIL_CHARS:],
                                        ranks=_rank_exits(data), failed_rank=int_field(data, "failed_rank", maximum=100_000)
                                        if failed is not None else None)
        elif event == "failed_to_start":
            lifecycle.assignment_failed_to_start(attempt_id=attempt.pk, node_id=self.node.pk, node_rank=rank,
                                                 message=str(data.get("message", ""))[:2000])
        else:
            raise FieldError("event", "one of started, exited, failed_to_start")
        return Response({"ok": True})


def _rank_exits(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each local process's exit, as the launcher recorded it (bounded, typed; unknown keys dropped)."""
    out = []
    for i, item in enumerate(_list(data, "ranks", 1024) if data.get("ranks") is not None else []):
        if not isinstance(item, dict):
            raise FieldError(f"ranks[{i}]", "an object with rank, local_rank, exit_code, signal, seconds")
        code, sig, secs = item.get("exit_code"), item.get("signal"), item.get("seconds")
        out.append({"rank": int_field(item, "rank", maximum=100_000), "local_rank": int_field(item, "local_rank", maximum=100_000),
                    "exit_code": code if isinstance(code, int) and not isinstance(code, bool) else None,
                    "signal": sig if isinstance(sig, int) and not isinstance(sig, bool) else None,
                    "seconds": float(secs) if isinstance(secs, int | float) and math.isfinite(secs) else None})
    return out


class RendezvousView(AgentView):
    """Rank 0's agent reports the port it bound; the other nodes' agents poll until it is known."""

    @extend_schema(request=None, responses=None)
    def post(self, request: Request) -> Response:
        data = _body(request)
        attempt = _report(self, data, allow_finished=False)
        port = int_field(data, "master_port", minimum=1, maximum=65535) if data.get("master_port") is not None else None
        addr, known = lifecycle.attempt_rendezvous(attempt_id=attempt.pk, node_rank=int_field(data, "node_rank", maximum=100_000),
                                                   master_port=port)
        return Response({"master_addr": addr, "master_port": known})


class LogView(AgentView):
    @extend_schema(request=None, responses=None)
    def post(self, request: Request) -> Response:
        data = _body(request)
        attempt = _report(self, data)
        lines = []
        for i, chunk in enumerate(_list(data, "chunks", protocol.MAX_LOG_CHUNKS)):
            text = chunk.get("text") if isinstance(chunk, dict) else None
            if not isinstance(text, str) or len(text) > protocol.MAX_LOG_CHUNK_BYTES:
                raise FieldError(f"chunks[{i}].text", f"a string of at most {protocol.MAX_LOG_CHUNK_BYTES} characters")
            stream = chunk.get("stream", "stdout")
            if stream not in protocol.LOG_STREAMS:
                raise FieldError(f"chunks[{i}].stream", "one of " + ", ".join(protocol.LOG_STREAMS))
            lines.append(LogLine(rank=int_field(chunk, "rank", maximum=100_000), seq=int_field(chunk, "seq", maximum=2**31 - 1),
                                 stream=stream, text=text))
        return Response({"accepted": attempt_logs_record(attempt=attempt, lines=lines)})


class EnergyView(AgentView):
    @extend_schema(request=None, responses=None)
    def post(self, request: Request) -> Response:
        data = _body(request)
        attempt = _report(self, data)
        rows = []
        for i, s in enumerate(_list(data, "samples", protocol.MAX_ENERGY_SAMPLES)):
            if not isinstance(s, dict):
                raise FieldError(f"samples[{i}]", "an object")
            at, energy = s.get("at"), s.get("energy_j")
            if not isinstance(at, int | float) or not isinstance(energy, int | float) or not math.isfinite(energy) or energy < 0:
                raise FieldError(f"samples[{i}]", "at (unix time) and energy_j (finite, >= 0) are required")
            power = s.get("power_w")
            util = s.get("utilization")
            rows.append(EnergyReading(device_index=int_field(s, "device_index", minimum=-1, maximum=1024),
                                      at=datetime.fromtimestamp(float(at), tz=UTC), energy_j=float(energy),
                                      power_w=float(power) if isinstance(power, int | float) else None,
                                      utilization=float(util) if isinstance(util, int | float) else None,
                                      estimated=bool(s.get("estimated", False))))
        return Response({"accepted": attempt_energy_record(attempt=attempt, node_id=self.node.pk, readings=rows)})


class ProgressView(AgentView):
    @extend_schema(request=None, responses=None)
    def post(self, request: Request) -> Response:
        data = _body(request)
        attempt = _report(self, data)
        total = int_field(data, "total_steps") if data.get("total_steps") is not None else None
        done = int_field(data, "steps_done") if data.get("steps_done") is not None else None
        lineage = data.get("lineage")
        if lineage is not None and (not isinstance(lineage, dict) or len(str(lineage)) > 100_000):
            raise FieldError("lineage", "an object of at most 100000 characters")
        attempt_progress_record(attempt=attempt, total_steps=total, steps_done=done, lineage=lineage)
        return Response({"ok": True})


class CheckpointView(AgentView):
    @extend_schema(request=None, responses=None)
    def post(self, request: Request) -> Response:
        data = _body(request)
        attempt = _report(self, data)
        name, sha = data.get("file"), data.get("sha256")
        if not isinstance(name, str) or not FILE_NAME.match(name):
            raise FieldError("file", "a plain file name of at most 200 characters")
        if not isinstance(sha, str) or not SHA256.match(sha):
            raise FieldError("sha256", "64 lowercase hex digits")
        metrics = data.get("metrics") or {}
        if not isinstance(metrics, dict):
            raise FieldError("metrics", "an object")
        ckpt = checkpoint_report(attempt=attempt, sha256=sha, step=int_field(data, "step"), file_name=name, size=int_field(data, "size"),
                                 metrics=metrics)
        answer: dict[str, Any] = {"id": ckpt.pk, "stored": bool(ckpt.stored_path)}
        # Older agents PUT the bytes to file/ and know no plan: none is made for them (an S3
        # multipart upload nobody completes would linger until the bucket's lifecycle rule).
        if self.node.protocol_version >= protocol.DIRECT_UPLOAD_PROTOCOL:
            plan = checkpoint_upload_plan(checkpoint=ckpt)
            if plan is not None:
                answer["upload"] = plan.message()
        return no_store(Response(answer))


class CheckpointCompleteView(AgentView):
    """The agent put the file in the store: its size is checked now, its sha256 by a worker
    (no web worker reads the bytes), which then records the checkpoint as stored."""

    @extend_schema(request=None, responses=None)
    def post(self, request: Request, checkpoint_id: int) -> Response:
        ckpt = _checkpoint_for(self.node, checkpoint_id)
        data = _body(request)
        upload_id = data.get("upload_id", "")
        if not isinstance(upload_id, str) or len(upload_id) > 1024:
            raise FieldError("upload_id", "the plan's upload id")
        parts: list[tuple[int, str]] = []
        for part in _list(data, "parts", 10_000):
            etag = part.get("etag") if isinstance(part, dict) else None
            if not isinstance(etag, str) or len(etag) > 200:
                raise FieldError("parts", "a list of {number, etag} as the store answered each part")
            parts.append((int_field(part, "number", minimum=1, maximum=10_000), etag))
        if ckpt.deleted_at is not None and not ckpt.stored_path:
            return Response({"stored": False, "deleted": True})
        stored = checkpoint_upload_complete(checkpoint=ckpt, upload_id=upload_id, parts=parts)
        return Response({"stored": True} if stored else {"stored": False, "checking": True})


class CheckpointDownloadLinkView(AgentView):
    """A fresh URL to fetch a checkpoint from the store directly (resume, init checkpoints)."""

    @extend_schema(request=None, responses=None)
    def get(self, request: Request, checkpoint_id: int) -> Response:
        ckpt = _checkpoint_for(self.node, checkpoint_id)
        if not ckpt.stored_path:
            raise NotFound(f"checkpoint {checkpoint_id} has no stored file")
        link: protocol.DownloadLink = {"url": checkpoint_download_url(checkpoint=ckpt), "size": ckpt.size, "sha256": ckpt.sha256}
        return no_store(Response(link))


class CheckpointDeletedView(AgentView):
    """The SDK's keep-last-K removed a checkpoint file on the node; the server's record stays."""

    @extend_schema(request=None, responses=None)
    def post(self, request: Request) -> Response:
        data = _body(request)
        attempt = _report(self, data)
        name = data.get("file")
        if not isinstance(name, str) or not FILE_NAME.match(name):
            raise FieldError("file", "a plain file name of at most 200 characters")
        return Response({"deleted": checkpoint_mark_deleted(attempt=attempt, step=int_field(data, "step"), file_name=name)})


def _checkpoint_for(node: Node, checkpoint_id: int) -> Checkpoint:
    return checkpoint_for_node(node_id=node.pk, checkpoint_id=checkpoint_id)


class CheckpointFileView(AgentView):
    """Protocol < 5: PUT passes the file (sha256 verified) on to the store; GET serves it."""

    @extend_schema(request=None, responses=None)
    def put(self, request: Request, checkpoint_id: int) -> Response:
        ckpt = _checkpoint_for(self.node, checkpoint_id)
        if ckpt.stored_path:
            return Response({"stored": True})
        if ckpt.deleted_at is not None:
            return Response({"stored": False, "deleted": True})  # retention removed it meanwhile: keep nothing
        if request.stream is None:
            raise FieldError("body", f"expected {ckpt.size} bytes")
        return Response({"stored": checkpoint_store_stream(checkpoint=ckpt, stream=request.stream)})

    @extend_schema(request=None, responses=None)
    def get(self, request: Request, checkpoint_id: int) -> FileResponse:
        ckpt = _checkpoint_for(self.node, checkpoint_id)
        # A deleted checkpoint keeps its file only while a run starts from it (see checkpoint_mark_deleted).
        try:
            return FileResponse(checkpoint_open(checkpoint=ckpt), content_type="application/octet-stream")
        except ObjectMissing:
            raise NotFound(f"checkpoint {checkpoint_id} has no stored file") from None
