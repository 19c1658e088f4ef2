"""A submission checks the recipe's rules at the world size the run will get: one process per
device by default, one per node for a template that starts its own workers (launch=per_node)."""

from __future__ import annotations

from typing import Any

from apps.jobtemplates.recipes import recipe_param_schema
from apps.runs.models import Run
from tests.runs.factories import body, local_pool, make_template

PARAMS = {"batch_size": 66, "grad_accum": 3}
TWO_BY_TWO = {"nodes": 2, "devices_per_node": 2}


def _schema() -> dict[str, Any]:
    schema = recipe_param_schema(module="digits_classifier")
    assert schema is not None
    return schema


def test_per_device_templates_count_every_device(cast: Any) -> None:
    local_pool()
    make_template(schema=_schema())
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast, params=PARAMS, resources=TWO_BY_TWO), format="json")
    assert response.status_code == 400, response.json()
    assert "(4 × 3 = 12;" in response.json()["error"]["fields"]["params.grad_accum"][0]
    assert Run.objects.count() == 0


def test_per_node_templates_count_one_process_per_node(cast: Any) -> None:
    local_pool()
    make_template(schema=_schema(), launch="per_node")
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast, params=PARAMS, resources=TWO_BY_TWO), format="json")
    assert response.status_code == 201, response.json()  # world size 2: 2 × 3 = 6 divides 66
