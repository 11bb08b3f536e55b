"""The hook's Prometheus metrics, scraped over HTTP while a simulated fleet publishes:
they are the hook's `stats()`, by construction, under Prometheus' naming conventions."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from rlmesh_stream.infra.proc import free_port
from rlmesh_stream.infra.topics import ensure_topics
from rlmesh_stream.producer import metrics
from rlmesh_stream.producer.config import ProducerSettings
from rlmesh_stream.producer.hooks import KafkaRuntimeHooks
from rlmesh_stream.producer.simulator import simulate_fleet
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.metrics.scrape import scrape, value

pytestmark = pytest.mark.stack


@pytest.fixture(autouse=True)
def _loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(metrics.ADDR_ENV, "127.0.0.1")


def test_delivered_counter_equals_stats_during_and_after_a_run(
        stream_config: StreamConfig) -> None:
    ensure_topics(stream_config, partitions=2, replication_factor=1)
    port = free_port()
    hooks = KafkaRuntimeHooks(config=stream_config, metrics_port=port)
    run = threading.Thread(target=simulate_fleet, args=(hooks,),
                           kwargs={"sessions": 4, "lanes": 2, "episodes": 3, "seed": 3})
    run.start()
    seen: list[float] = []
    try:
        while run.is_alive():
            live = scrape(port)
            delivered = value(live, "rlmesh_stream_producer_events_delivered_total")
            assert delivered <= value(live, "rlmesh_stream_producer_events_accepted_total")
            seen.append(delivered)
        run.join()
        hooks.flush(30)
        stats = hooks.stats()
        final = scrape(port)
        assert value(final, "rlmesh_stream_producer_events_delivered_total",
                     producer_id=hooks.producer_id) == stats.delivered > 0
        assert value(final, "rlmesh_stream_producer_events_accepted_total") == stats.accepted
        assert value(final, "rlmesh_stream_producer_delivered_bytes_total") == \
            stats.delivered_bytes
        assert value(final, "rlmesh_stream_producer_events_in_flight") == 0
        assert seen and seen == sorted(seen)  # scraped live; a counter never goes down
    finally:
        hooks.close()


def test_metric_names_follow_prometheus_conventions(stream_config: StreamConfig) -> None:
    hooks = KafkaRuntimeHooks(config=stream_config, metrics_port=free_port())
    try:
        assert hooks.metrics_server is not None
        families = list(text_string_to_metric_families(
            generate_latest(hooks.metrics_server.registry).decode()))
    finally:
        hooks.close()
    assert families
    for family in families:
        assert family.name.startswith("rlmesh_stream_producer_"), family.name
        for sample in family.samples:
            if family.type == "counter":
                assert sample.name.endswith(("_total", "_created")), sample.name
            else:
                assert not sample.name.endswith("_total"), sample.name


def test_the_hook_registers_in_a_registry_the_user_exposes(stream_config: StreamConfig) -> None:
    hooks = KafkaRuntimeHooks(config=stream_config)
    registry = CollectorRegistry()
    try:
        assert hooks.metrics_server is None  # no metrics_port: nothing served
        metrics.register(hooks, registry, stream_config.topic_prefix)
        text = generate_latest(registry).decode()
    finally:
        hooks.close()
    samples: dict[str, Any] = {s.name: s for f in text_string_to_metric_families(text)
                               for s in f.samples}
    accepted = samples["rlmesh_stream_producer_events_accepted_total"]
    assert accepted.labels == {"producer_id": hooks.producer_id,
                               "topic_prefix": stream_config.topic_prefix}


def test_the_metrics_port_stops_serving_when_the_hook_closes(
        stream_config: StreamConfig) -> None:
    port = free_port()
    hooks = KafkaRuntimeHooks(config=stream_config, metrics_port=port)
    assert value(scrape(port), "rlmesh_stream_producer_events_accepted_total") == 0
    hooks.close()
    with pytest.raises(OSError):
        scrape(port)


def test_the_metrics_port_is_a_producer_setting_from_the_environment() -> None:
    settings = ProducerSettings.from_env({"RLMESH_STREAM_METRICS_PORT": "9464"})
    assert settings.metrics_port == 9464
    assert ProducerSettings.from_env({}).metrics_port is None


def test_a_taken_metrics_port_is_logged_and_the_hook_publishes_anyway(
        stream_config: StreamConfig, caplog: pytest.LogCaptureFixture) -> None:
    ensure_topics(stream_config, partitions=1, replication_factor=1)
    first = KafkaRuntimeHooks(config=stream_config, metrics_port=free_port())
    assert first.metrics_server is not None
    try:
        second = KafkaRuntimeHooks(config=stream_config,
                                   metrics_port=first.metrics_server.port)
        try:
            assert second.metrics_server is None
            assert f"cannot serve the hook's metrics on port {first.metrics_server.port}" \
                in caplog.text
            simulate_fleet(second, sessions=1, lanes=1, episodes=1, seed=1)
            assert second.flush(30) == 0
            assert second.stats().delivered == second.stats().accepted > 0
        finally:
            second.close()
    finally:
        first.close()
