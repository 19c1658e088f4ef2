"""A real Slurm cluster (tests/slurm/cluster.py) for the session, started once, as root."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.slurm.cluster import SlurmCluster, slurm_missing


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    missing = slurm_missing()
    if missing:
        # CI runs as root with the packages installed by `make test` (Makefile TEST_PACKAGES): there
        # this never fails. Elsewhere it fails rather than skips, saying what is needed.
        pytest.fail(f"the Slurm tests need a real Slurm: {missing}")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
