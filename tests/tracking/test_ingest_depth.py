"""A metric batch between the web's JSON size limit and the ingest limit skips the web's depth
check: nested 1.5 million levels deep, it is a 400 naming the limit, not a RecursionError (500)."""

from __future__ import annotations

import pytest

from apps.core.errors import ServiceError
from apps.tracking.services import metric_batch_parse


def test_a_deeply_nested_metric_batch_is_refused_naming_the_limit() -> None:
    body = b'{"attempt_id": 1, "attempt": 1, "points": ' + b"[" * 1_500_000 + b"]" * 1_500_000 + b"}"
    assert len(body) > 2_621_440  # past the web's own JSON limits, so only the parser stands in the way
    with pytest.raises(ServiceError) as err:
        metric_batch_parse(body=body)
    assert err.value.code == "too_deep" and "the limit is 64 levels" in str(err.value)
