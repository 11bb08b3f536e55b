"""`StreamConfig` from the environment: a number of seconds is checked like the CLI checks it."""

from __future__ import annotations

import pytest

from rlmesh_stream.schemas.connection.config import StreamConfig


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "0", "-1"])
def test_a_registry_timeout_that_is_not_a_finite_positive_number_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="RLMESH_STREAM_REGISTRY_TIMEOUT"):
        StreamConfig.from_env({"RLMESH_STREAM_REGISTRY_TIMEOUT": raw})


def test_a_registry_timeout_from_the_environment_is_a_float() -> None:
    assert StreamConfig.from_env({"RLMESH_STREAM_REGISTRY_TIMEOUT": "2.5"}).registry_timeout == 2.5
