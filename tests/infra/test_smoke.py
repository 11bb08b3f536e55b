"""`rlmesh-stream infra smoke`: the one-record end-to-end check `make demo` falls back to."""

from __future__ import annotations

from click.testing import CliRunner

from rlmesh_stream.infra.cli import main
from rlmesh_stream.schemas.connection.config import StreamConfig


def test_smoke_against_a_running_stack_reads_back_what_it_wrote(
    stream_config: StreamConfig,
) -> None:
    result = CliRunner().invoke(main, [
        "infra", "smoke", "--no-up", "--bootstrap", stream_config.bootstrap,
        "--registry-url", stream_config.registry_url,
        "--topic-prefix", stream_config.topic_prefix])
    assert result.exit_code == 0, result.output
    assert f"registered {stream_config.topic_prefix}.smoke-value" in result.stdout
    assert "smoke OK" in result.stdout
