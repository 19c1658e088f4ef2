"""runs/log-inputs (``mlflow.log_input``): dataset inputs stored per run, deduplicated on (run, name,
digest) as MLflow does, returned by runs/get and runs/search, bounded by MLflow's limits."""

from __future__ import annotations

from typing import Any

from apps.mlflow_api.models import DatasetInput
from apps.mlflow_api.services import DATASET_LIMITS, MAX_INPUT_TAG_VALUE
from tests.mlflow.test_api import Mlflow, alice, error, tracked

__all__ = ["alice", "tracked"]  # fixtures


def dataset(name: str = "mnist", digest: str = "abc123", **extra: Any) -> dict[str, Any]:
    return {"name": name, "digest": digest, "source_type": "local", "source": '{"uri": "/data/mnist"}', **extra}


def test_log_inputs_stores_dedupes_and_returns(cast: Any, alice: Mlflow, tracked: dict[str, Any]) -> None:
    run_id = tracked["info"]["run_id"]
    assert tracked["inputs"] == {}
    train = {"tags": [{"key": "mlflow.data.context", "value": "training"}],
             "dataset": dataset(schema='{"mlflow_colspec": []}', profile='{"num_rows": 10}')}
    assert alice.post("runs/log-inputs", {"run_id": run_id, "datasets": [train]}).json() == {}
    # The same (name, digest) again, even with other tags, changes nothing; another digest is another input.
    again = {"tags": [{"key": "mlflow.data.context", "value": "eval"}], "dataset": dataset()}
    other = {"tags": [{"key": "mlflow.data.context", "value": "eval"}], "dataset": dataset(digest="def456")}
    assert alice.post("runs/log-inputs", {"run_id": run_id, "datasets": [again, other, other], "models": []}).status_code == 200
    assert DatasetInput.objects.filter(run_id=run_id).count() == 2
    got = alice.get("runs/get", run_id=run_id).json()["run"]["inputs"]["dataset_inputs"]
    assert got == [train, other]
    found = alice.post("runs/search", {"experiment_ids": [str(cast.digits.pk)]}).json()["runs"]
    assert [r["inputs"]["dataset_inputs"] for r in found if r["info"]["run_id"] == run_id] == [[train, other]]
    # No datasets is a no-op, as in MLflow.
    assert alice.post("runs/log-inputs", {"run_id": run_id}).status_code == 200


def test_log_inputs_limits_name_the_field(alice: Mlflow, tracked: dict[str, Any]) -> None:
    run_id = tracked["info"]["run_id"]

    def refused(datasets: Any) -> str:
        return error(alice.post("runs/log-inputs", {"run_id": run_id, "datasets": datasets}), 400, "INVALID_PARAMETER_VALUE")

    assert "datasets[0].dataset.name: is 501 characters; the limit is 500" in refused([{"dataset": dataset(name="n" * 501)}])
    assert "datasets[0].dataset.digest: is 37 characters; the limit is 36" in refused([{"dataset": dataset(digest="d" * 37)}])
    limit = DATASET_LIMITS["source"]
    assert f"datasets[1].dataset.source: is {limit + 1} characters; the limit is {limit}" in refused(
        [{"dataset": dataset()}, {"dataset": dataset(source="s" * (limit + 1))}])
    assert "datasets[0].dataset.source_type: required" in refused([{"dataset": {"name": "a", "digest": "b", "source": "c"}}])
    too_long = {"key": "mlflow.data.context", "value": "v" * (MAX_INPUT_TAG_VALUE + 1)}
    assert f"datasets[0].tags[0].value: is {MAX_INPUT_TAG_VALUE + 1} characters; the limit is {MAX_INPUT_TAG_VALUE}" in refused(
        [{"dataset": dataset(), "tags": [too_long]}])
    assert "datasets[0].tags[0].key: is 256 characters; the limit is 255" in refused(
        [{"dataset": dataset(), "tags": [{"key": "k" * 256, "value": "v"}]}])
    assert "datasets: 1001 given; the limit is 1000" in refused([{"dataset": dataset(digest=str(i))} for i in range(1001)])
    assert "datasets: must be a list" in refused("mnist")
    assert "datasets[0]: must be an object" in refused([dataset()])
    # A refused request stores nothing, not even its valid entries.
    assert not DatasetInput.objects.filter(run_id=run_id).exists()


def test_log_inputs_tenancy(cast: Any, alice: Mlflow, tracked: dict[str, Any]) -> None:
    run_id = tracked["info"]["run_id"]
    body = {"run_id": run_id, "datasets": [{"dataset": dataset()}]}
    error(Mlflow(cast.bob).post("runs/log-inputs", body), 404, "RESOURCE_DOES_NOT_EXIST")
    error(Mlflow(cast.victor).post("runs/log-inputs", body), 403, "PERMISSION_DENIED")
    assert not DatasetInput.objects.filter(run_id=run_id).exists()
    # A deleted run takes no inputs until restored, as in MLflow.
    assert alice.post("runs/delete", {"run_id": run_id}).status_code == 200
    error(alice.post("runs/log-inputs", body), 400, "INVALID_PARAMETER_VALUE")
    assert alice.post("runs/restore", {"run_id": run_id}).status_code == 200
    assert alice.post("runs/log-inputs", body).status_code == 200
    assert Mlflow(cast.victor).get("runs/get", run_id=run_id).json()["run"]["inputs"]["dataset_inputs"][0]["dataset"]["name"] == "mnist"
