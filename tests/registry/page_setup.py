"""Run inside the live stack with `manage.py shell -c`: a model of vision/digits with v1 in
production on evidence, v2 a candidate with a passing evaluate run, v3 below the bar, and the
family's spend. Prints the model's id as JSON."""

from __future__ import annotations

import json

from django.contrib.auth.models import User
from django.db import transaction

from apps.registry import services
from apps.tenants.models import Project
from tests.registry.factories import evaluate_run, spend, train_run


def main() -> None:
    project = Project.objects.get(team__slug="vision", slug="digits")
    alice = User.objects.get(username="alice")
    with transaction.atomic():
        model = services.model_create(project=project, name="digits-classifier", user=alice, description="The digits MLP we serve.",
                                      thresholds=[{"metric": "val_accuracy", "op": ">=", "value": 0.9},
                                                  {"metric": "val_loss", "op": "<", "value": 0.5}])
        run, ckpts = train_run(project, family="digits-mlp", name="digits-mlp-long", steps=(100, 200, 300))
        spend(run, "3.40")
        figures = [(0.93, 0.31), (0.95, 0.22), (0.81, 0.64)]
        for ckpt, (acc, loss) in zip(ckpts, figures, strict=True):
            services.version_create(model=model, user=alice, checkpoint=ckpt.pk)
            evaluate_run(project, ckpt, metrics={"val_accuracy": acc, "val_loss": loss}, name=f"eval-step-{ckpt.step}")
        services.version_promote(version=model.versions.get(number=1), user=alice)
    print(json.dumps({"model": model.pk, "run": run.pk}))


main()
