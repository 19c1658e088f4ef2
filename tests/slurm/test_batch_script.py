"""What a run becomes on Slurm: its sbatch options and environment, and the pool it needs."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from apps.jobtemplates.models import JobTemplate, TemplateKind
from apps.nodes.models import NodePool, PoolBackend
from apps.runs.models import Run
from apps.slurm.models import DeviceMode, SlurmPool
from apps.slurm.services import _credential_node, batch_script, slurm_pool_save

TAGS = {"task": "classify", "dataset": "digits", "candidate": "baseline", "family": "fam-a"}


def _run(cast: Any, pool: NodePool, **fields: Any) -> Run:
    template = JobTemplate.objects.create(slug="t", version=1, title="T", kind=TemplateKind.CUSTOM, entrypoint="python x.py")
    return Run.objects.create(project=cast.digits, template=template, pool=pool, entrypoint="python x.py", **fields)


def test_batch_script_maps_run_onto_slurm(cast: Any) -> None:
    cfg = slurm_pool_save(pool_name="hpc", partition="gpu", server_url="https://ty.example.com/", workdir="/shared/ty",
                          submit_command=["ssh", "login1"], device_mode=DeviceMode.GPU,
                          accounts={"vision/digits": "vision-acct", "*": "ml"}, qos={"urgent": "high"})
    assert cfg.pool.backend == PoolBackend.SLURM and SlurmPool.objects.get(pool__name="hpc").server_url == "https://ty.example.com"
    run = _run(cast, cfg.pool, nodes=2, devices_per_node=4, max_runtime_s=90, priority="urgent")
    node, credential = _credential_node(cfg=cfg, run=run)
    script = batch_script(cfg=cfg, run=run, node=node, credential=credential)
    for option in ("--partition=gpu", "--nodes=2", "--gpus-per-node=4", "--time=2", "--account=vision-acct", "--qos=high",
                   "--requeue", "--export=NONE", "--ntasks-per-node=1"):
        assert f"#SBATCH {option}\n" in script, option
    assert f"TRAINYARD_SLURM_CREDENTIAL={credential}" in script and "srun" in script and "agents.slurm_job" in script
    assert "DATABASE_URL" not in script


def test_cpu_devices_and_default_account(cast: Any) -> None:
    cfg = slurm_pool_save(pool_name="cpu", partition="debug", server_url="http://127.0.0.1:8000", workdir="/tmp/ty",
                          submit_command=[], device_mode=DeviceMode.CPU, accounts={"*": "ml"}, qos={})
    run = _run(cast, cfg.pool, devices_per_node=2)
    node, credential = _credential_node(cfg=cfg, run=run)
    script = batch_script(cfg=cfg, run=run, node=node, credential=credential)
    assert "#SBATCH --cpus-per-task=2\n" in script and "--gpus-per-node" not in script and "#SBATCH --account=ml\n" in script
    assert "--qos" not in script


def test_over_budget_project_is_refused_for_a_slurm_pool_as_for_an_agent_pool(cast: Any) -> None:
    """Acceptance 5: the same admission check, the same 400 and words, whatever the backend."""
    from apps.billing.services import budget_create
    from tests.billing.helpers import make_pool, make_template

    make_pool("local", list_price="0.50")
    slurm_pool_save(pool_name="hpc", partition="gpu", server_url="http://127.0.0.1:8000", workdir="/tmp/ty", submit_command=[],
                    device_mode=DeviceMode.GPU, accounts={}, qos={}, price=Decimal("0.50"))
    template = make_template("digits")
    budget_create(team=cast.vision, project=cast.digits, amount="3.00")
    answers = {}
    for pool in ("local", "hpc"):
        response = cast.client(cast.alice).post("/api/v1/runs/", {
            "project": cast.digits.pk, "template": template.slug, "params": {}, "tags": TAGS,
            "resources": {"pool": pool, "devices_per_node": 2, "max_runtime_s": 4 * 3600}}, format="json")
        assert response.status_code == 400, response.content
        answers[pool] = response.json()["error"]
    assert answers["hpc"]["code"] == answers["local"]["code"] == "budget_exceeded"
    assert answers["hpc"]["message"] == answers["local"]["message"]
    assert "this run would cost up to $4.00" in answers["hpc"]["message"]
    assert not Run.objects.filter(pool__name="hpc").exists()
