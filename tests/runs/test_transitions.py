"""The run state machine (apps.runs.services.transitions): its table decides every status change,
each change is audited and emits its webhook, and no other code writes `Run.status`."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from apps.audit.models import AuditEvent
from apps.jobtemplates.models import JobTemplate
from apps.nodes.models import NodePool
from apps.runs.models import FINISHED_STATUSES, Run, RunStatus
from apps.runs.services.transitions import (
    INITIAL_STATUSES,
    RUN_TRANSITIONS,
    IllegalTransition,
    run_new,
    run_transition,
    runs_transition_many,
)
from apps.webhooks.models import EventType, WebhookEvent

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("apps", "agents", "portal")
THE_WRITER = Path("apps/runs/services/transitions.py")

# --- the static check: who writes Run.status ----------------------------------------------------

# A Run is `Run(...)`, a Run.objects/.runs/.children chain, a name run(s)/*_run(s)/parent/child(ren), or a local bound to one.
RUN_NAME = re.compile(r"^(runs?|\w+_runs?|parent|child|children)$")
MANAGERS = {"objects", "_default_manager", "_base_manager"}
RELATED = {"runs", "children"}  # Project/JobTemplate/NodePool/CodeSnapshot.runs, Run.children
WRITES = {"update", "create", "get_or_create", "update_or_create", "bulk_create", "bulk_update"}
RAW_UPDATE = re.compile(r"update\s+\W?(runs_run|\{Run\._meta\.db_table\})\W?\s+set\b[^;]*\bstatus\s*=", re.I | re.S)


def _is_run_class(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "Run") or (isinstance(node, ast.Attribute) and node.attr == "Run")


def _is_run(node: ast.expr, bound: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in bound or bool(RUN_NAME.match(node.id))
    if isinstance(node, ast.Attribute):
        return bool(RUN_NAME.match(node.attr)) or node.attr in RELATED or (node.attr in MANAGERS and _is_run_class(node.value))
    if isinstance(node, ast.Subscript):
        return _is_run(node.value, bound)
    if isinstance(node, ast.Call):
        func = node.func
        if _is_run_class(func):
            return True
        if isinstance(func, ast.Attribute):  # a queryset or manager method: what it is called on
            return _is_run(func.value, bound)
        return isinstance(func, ast.Name) and bool(RUN_NAME.match(func.id.lstrip("_")))
    return False


def _walk(scope: ast.AST) -> list[ast.AST]:
    """The scope's nodes, without the bodies of the functions it defines (each is its own scope)."""
    out: list[ast.AST] = []
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        out.append(node)
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            todo.extend(ast.iter_child_nodes(node))
    return out


def _annotated_run(annotation: ast.expr | None) -> bool:
    return annotation is not None and re.search(r"\bRun\b", ast.unparse(annotation)) is not None


def _bindings(scope: ast.AST) -> set[str]:
    """Names the scope binds to a Run (flow-insensitive, to a fixed point: `b = a` after `a = run`)."""
    bound: set[str] = set()
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = scope.args
        bound |= {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs] if _annotated_run(a.annotation)}
    while True:
        before = len(bound)
        for node in _walk(scope):
            if isinstance(node, ast.Assign) and _is_run(node.value, bound):
                bound |= {t.id for t in node.targets if isinstance(t, ast.Name)}
                bound |= {t.elts[0].id for t in node.targets if isinstance(t, ast.Tuple) and isinstance(t.elts[0], ast.Name)}
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if _annotated_run(node.annotation) or (node.value is not None and _is_run(node.value, bound)):
                    bound.add(node.target.id)
            elif isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.target, ast.Name) and _is_run(node.iter, bound):
                bound.add(node.target.id)
        if len(bound) == before:
            return bound


def _names_status(node: ast.expr | None) -> bool:
    """A literal dict with a "status" key or a literal list/tuple/set holding "status"."""
    if isinstance(node, ast.Dict):
        return any(isinstance(k, ast.Constant) and k.value == "status" for k in node.keys)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return any(isinstance(e, ast.Constant) and e.value == "status" for e in node.elts)
    return False


def _call_writes_status(call: ast.Call, bound: set[str]) -> bool:
    kwargs = {kw.arg: kw.value for kw in call.keywords if kw.arg is not None}
    splats = [kw.value for kw in call.keywords if kw.arg is None]
    sets_status = "status" in kwargs or any(_names_status(s) for s in splats)
    func = call.func
    if _is_run_class(func):
        return sets_status
    if isinstance(func, ast.Name) and func.id == "setattr" and len(call.args) >= 2:
        target, name = call.args[0], call.args[1]
        return isinstance(name, ast.Constant) and name.value == "status" and _is_run(target, bound)
    if not (isinstance(func, ast.Attribute) and func.attr in WRITES and _is_run(func.value, bound)):
        return False
    if func.attr == "bulk_update":
        fields = call.args[1] if len(call.args) > 1 else kwargs.get("fields")
        return _names_status(fields)
    defaults = [kwargs.get("defaults"), kwargs.get("create_defaults")]
    return sets_status or any(_names_status(d) for d in defaults)


def _sql(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "{" + ast.unparse(v.value) + "}"
                       for v in node.values if isinstance(v, (ast.Constant, ast.FormattedValue)))
    return ""


def run_status_writes(source: str, filename: str = "<source>") -> list[str]:
    """`file:line` of every write of a Run's status in the source (see the heuristic above)."""
    tree = ast.parse(source, filename)
    found: set[int] = set()
    scopes: list[ast.AST] = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    for scope in scopes:
        bound = _bindings(scope)
        for node in _walk(scope):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
                targets = [node.target]
            flat = [e for t in targets for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])]
            if any(isinstance(t, ast.Attribute) and t.attr == "status" and _is_run(t.value, bound) for t in flat):
                found.add(targets[0].lineno)
            if isinstance(node, ast.Call) and _call_writes_status(node, bound):
                found.add(node.lineno)
            if isinstance(node, (ast.Constant, ast.JoinedStr)) and RAW_UPDATE.search(_sql(node)):
                found.add(node.lineno)
    return [f"{filename}:{line}" for line in sorted(found)]


def _scanned_files() -> list[Path]:
    files = [p for top in SCANNED for p in sorted((ROOT / top).rglob("*.py"))]
    return [p for p in files if "migrations" not in p.parts and p.relative_to(ROOT) != THE_WRITER]


def test_only_the_transition_module_writes_run_status() -> None:
    files = _scanned_files()
    assert len(files) > 50  # the walk found the code base
    writes = [w for p in files for w in run_status_writes(p.read_text(), str(p.relative_to(ROOT)))]
    assert writes == [], "Run.status written outside apps/runs/services/transitions.py (use run_transition, " \
                         "runs_transition_many or run_new):\n" + "\n".join(writes)


PLANTED = '''\
from apps.runs.models import Attempt, Run


def finish(run, attempt, delivery):
    run.status = "queued"
    Run.objects.filter(pk=1).update(status="failed")
    attempt.status = "failed"
    delivery.status = "sent"
    Attempt.objects.filter(run=run).update(status="lost")
    run.attempts.filter(number=1).update(status="lost")
    run.status_reason = "fine: not the status"


def sneaky(pk: int, other: Run, rows: list) -> None:
    locked = Run.objects.select_for_update().get(pk=pk)
    locked.status, locked.reason_code = "lost", ""
    other.status = "failed"
    Run(status="running")
    Run.objects.bulk_update(rows, ["status", "updated_at"])
    project.runs.update(**{"status": "cancelled"})
    setattr(locked, "status", "queued")
    cursor.execute(f"UPDATE {Run._meta.db_table} SET status = %s WHERE id = %s", ["failed", pk])
    Attempt.objects.bulk_update(rows, ["status"])
'''


def test_the_static_check_finds_planted_writes_and_only_those() -> None:
    lines = PLANTED.splitlines()
    found = [lines[int(w.split(":")[1]) - 1].strip() for w in run_status_writes(PLANTED)]
    assert found == [
        'run.status = "queued"',
        'Run.objects.filter(pk=1).update(status="failed")',
        'locked.status, locked.reason_code = "lost", ""',
        'other.status = "failed"',
        'Run(status="running")',
        'Run.objects.bulk_update(rows, ["status", "updated_at"])',
        'project.runs.update(**{"status": "cancelled"})',
        'setattr(locked, "status", "queued")',
        'cursor.execute(f"UPDATE {Run._meta.db_table} SET status = %s WHERE id = %s", ["failed", pk])',
    ]


# --- the table ----------------------------------------------------------------------------------

def test_the_table_covers_every_state_and_design_md_paths() -> None:
    assert set(RUN_TRANSITIONS) == set(RunStatus.values)
    assert all(RUN_TRANSITIONS[s] == frozenset() for s in FINISHED_STATUSES)
    design = [("queued", "scheduled"), ("scheduled", "running"), ("running", "succeeded"), ("running", "failed"),
              ("running", "cancelled"), ("running", "preempted"), ("preempted", "queued"), ("running", "lost"),
              ("lost", "queued"), ("lost", "failed")]
    assert [(a, b) for a, b in design if b not in RUN_TRANSITIONS[a]] == []
    unfinished = set(RunStatus.values) - FINISHED_STATUSES
    assert all(RunStatus.CANCELLED in RUN_TRANSITIONS[s] for s in unfinished)


def _run(cast: Any, status: str = RunStatus.QUEUED) -> Run:
    pool, _ = NodePool.objects.get_or_create(name="local")
    template, _ = JobTemplate.objects.get_or_create(slug="t", version=1, defaults={"title": "t", "kind": "custom", "entrypoint": "x"})
    run = run_new(status=status, project=cast.digits, template=template, pool=pool, entrypoint="python x.py",
                  submitted_by=cast.alice, queued_at=timezone.now())
    run.save()
    return run


def test_an_allowed_move_writes_status_reason_audit_and_webhook(cast: Any) -> None:
    run = _run(cast, RunStatus.RUNNING)
    run_transition(run, to=RunStatus.FAILED, action="run.failed", reason="rank 0 failed with exit code 1",
                   reason_code="exit_code", restarts=2, actor=cast.alice)
    run.refresh_from_db()
    assert (run.status, run.status_reason, run.reason_code, run.restarts) == ("failed", "rank 0 failed with exit code 1",
                                                                              "exit_code", 2)
    assert run.finished_at is not None
    event = AuditEvent.objects.get(action="run.failed", object_id=str(run.pk))
    assert (event.before, event.after, event.actor) == ({"status": "running"}, {"status": "failed",
                                                        "reason": "rank 0 failed with exit code 1"}, cast.alice)
    hook = WebhookEvent.objects.get(project=cast.digits, type=EventType.RUN_FAILED)
    assert hook.payload["run"]["id"] == run.pk and hook.payload["run"]["status"] == "failed"


def test_a_disallowed_move_raises_and_changes_nothing(cast: Any) -> None:
    run = _run(cast, RunStatus.SUCCEEDED)
    events = AuditEvent.objects.count()
    with pytest.raises(IllegalTransition, match=f"run {run.pk} cannot go from succeeded to running") as err:
        run_transition(run, to=RunStatus.RUNNING, action="run.running", started_at=timezone.now())
    assert err.value.status_code == 409 and err.value.code == "illegal_transition"
    assert run.status == RunStatus.SUCCEEDED and run.started_at is None
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED and run.started_at is None
    assert AuditEvent.objects.count() == events
    queued = _run(cast)
    with pytest.raises(IllegalTransition):
        run_transition(queued, to=RunStatus.RUNNING, action="run.running")  # never placed
    with pytest.raises(IllegalTransition):
        run_new(status=RunStatus.SCHEDULED)


def test_the_bulk_move_is_one_conditional_update_and_refuses_a_stale_row(cast: Any,
                                                                          django_assert_num_queries: Any) -> None:
    runs = [_run(cast), _run(cast)]
    now = timezone.now()
    with django_assert_num_queries(2):  # one UPDATE, one audit INSERT
        runs_transition_many(runs=runs, from_=RunStatus.QUEUED, to=RunStatus.SCHEDULED, action="run.scheduled", now=now,
                             fields={"queue_position": None}, after={runs[0].pk: {"pool": "local"}})
    assert list(Run.objects.filter(pk__in=[r.pk for r in runs]).values_list("status", flat=True)) == ["scheduled"] * 2
    assert runs[0].status == RunStatus.SCHEDULED
    after = dict(AuditEvent.objects.filter(action="run.scheduled").values_list("object_id", "after"))
    assert after == {str(runs[0].pk): {"status": "scheduled", "pool": "local"}, str(runs[1].pk): {"status": "scheduled"}}
    stale = _run(cast)
    with pytest.raises(RuntimeError, match="moved 1 of 2 runs"):
        runs_transition_many(runs=[stale, runs[0]], from_=RunStatus.QUEUED, to=RunStatus.SCHEDULED, action="run.scheduled",
                             now=now)
    with pytest.raises(IllegalTransition):
        runs_transition_many(runs=runs, from_=RunStatus.SUCCEEDED, to=RunStatus.RUNNING, action="run.running", now=now)


def test_runs_are_born_only_in_initial_states() -> None:
    assert INITIAL_STATUSES == {RunStatus.QUEUED, RunStatus.RUNNING} | FINISHED_STATUSES
    assert run_new().status == RunStatus.QUEUED
