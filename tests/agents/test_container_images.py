"""Approved container images (issue 24): admins keep the list, a template names one, a submission
asking for another is a 400 naming the field, the claim spec carries the image, and the template's
API shows it. The container run itself is tests/agents/test_container_live.py."""

from __future__ import annotations

from typing import Any

import pytest

from apps.audit.models import AuditEvent
from apps.core.errors import FieldError
from apps.jobtemplates.models import ApprovedImage
from apps.jobtemplates.services import image_approve
from tests.runs.factories import body, local_pool, make_template

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def _field(response: Any, name: str) -> str:
    return str(response.json()["error"]["fields"][name][0])


@pytest.fixture
def boxed(cast: Any) -> Any:
    local_pool()
    image = image_approve(name="trainyard/digits:1", digest=DIGEST, description="torch 2.13 CPU")
    return make_template(image=image)


def test_approving_checks_the_digest_and_is_audited(db: Any) -> None:
    with pytest.raises(FieldError) as err:
        image_approve(name="trainyard/x:1", digest="latest")
    assert err.value.fields == {"digest": ["must be sha256: and 64 lowercase hex digits (got 'latest')"]}
    image = image_approve(name="trainyard/x:1", digest=DIGEST)
    again = image_approve(name="trainyard/x:1", digest=OTHER)
    assert again.pk == image.pk and again.digest == OTHER and ApprovedImage.objects.count() == 1
    assert AuditEvent.objects.filter(action="image.approve").count() == 2


def test_a_submission_naming_an_unapproved_image_is_refused_by_field(cast: Any, boxed: Any) -> None:
    client = cast.client(cast.alice)
    for asked, words in (("evil/miner:latest", "is not an approved image"),
                         (f"trainyard/digits:1@{OTHER}", "is not an approved image"),
                         ("x" * 401, "no more than 400 characters")):
        response = client.post("/api/v1/runs/", body(cast, image=asked), format="json")
        assert response.status_code == 400, response.content
        assert words in _field(response, "image"), (asked, response.json())
    image_approve(name="trainyard/other:1", digest=OTHER)
    response = client.post("/api/v1/runs/", body(cast, image="trainyard/other:1"), format="json")
    assert response.status_code == 400
    assert _field(response, "image") == ("'trainyard/other:1' is approved, but this template runs in trainyard/digits:1: "
                                        "a run uses its template's image")


def test_the_templates_own_image_is_accepted_and_reaches_the_claim_spec(cast: Any, boxed: Any) -> None:
    client = cast.client(cast.alice)
    for asked in ("", "trainyard/digits:1", f"trainyard/digits:1@{DIGEST}"):
        response = client.post("/api/v1/runs/", body(cast, image=asked), format="json")
        assert response.status_code == 201, response.content
    shown = client.get("/api/v1/templates/digits-classifier/").json()
    assert shown["image"] == {"name": "trainyard/digits:1", "digest": DIGEST}
    from apps.fleet.services import _image
    from apps.runs.models import Run

    run = Run.objects.order_by("-pk").first()
    assert run is not None
    assert _image(run) == {"name": "trainyard/digits:1", "digest": DIGEST}


def test_a_withdrawn_image_refuses_new_runs_of_its_templates(cast: Any, boxed: Any) -> None:
    ApprovedImage.objects.update(active=False)
    response = cast.client(cast.alice).post("/api/v1/runs/", body(cast), format="json")
    assert response.status_code == 400
    assert "is no longer approved" in _field(response, "image")


def test_any_signed_in_user_lists_the_approved_images(cast: Any, boxed: Any) -> None:
    image_approve(name="trainyard/old:1", digest=OTHER)
    ApprovedImage.objects.filter(name="trainyard/old:1").update(active=False)
    listed = cast.client(cast.bob).get("/api/v1/images/").json()["results"]
    assert [(i["name"], i["digest"]) for i in listed] == [("trainyard/digits:1", DIGEST)]
    assert cast.client(None).get("/api/v1/images/").status_code == 401
