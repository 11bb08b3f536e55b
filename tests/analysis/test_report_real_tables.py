"""The reports over tables built by the real consumers from records on the real stack.

The other report tests insert rows by hand; these check that the reports read
what the builders actually write (enum spellings, counts, route columns).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from rlmesh_stream.consumers.analysis.report_cli import GATE_EXIT_CODE, report
from rlmesh_stream.consumers.analysis.reports import advisory_report, delivery_report, open_store
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.events import (
    Advisory,
    AdvisorySeverity,
    Leg,
    RelayAdvisoryEvent,
    RuntimeEnvContext,
    SessionEndedEvent,
    SessionStartedEvent,
)
from rlmesh_stream.schemas.contract.topics import EventType
from tests.consumers.consumer_helpers import run_offline

pytestmark = pytest.mark.stack

PPO = RuntimeEnvContext(env_id="Humanoid-v5", env_component_id="env", model_component_id="ppo")
SAC = RuntimeEnvContext(env_id="Humanoid-v5", env_component_id="env", model_component_id="sac")
FAKE = "missing observation key 'depth' filled with zeros"
CAST = "action cast float64 -> float32"


def _advisory(session: str, route: RuntimeEnvContext, leg: Leg, severity: AdvisorySeverity,
              message: str) -> RelayAdvisoryEvent:
    return RelayAdvisoryEvent(session_id=session, route=route, leg=leg,
                              advisory=Advisory(severity=severity, message=message))


def _publish(config: StreamConfig, events: list) -> None:
    """Publish as a producer does: framed values, session keys, id + sequence headers."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from rlmesh_stream.schemas.codec.serde import EventSerializer

    serializer = EventSerializer(SchemaRegistryClient(config.registry_config()),
                                 topic_prefix=config.topic_prefix)
    producer = Producer(config.kafka_config())
    producer_id = uuid.uuid4().hex
    for seq, event in enumerate(events):
        et = EventType.of(event)
        producer.produce(et.topic(config.topic_prefix), key=event.session_id.encode(),
                         value=serializer(event),
                         headers=[(h.EVENT_TYPE, et.value.encode()),
                                  (h.CONTRACT, b"1"),  # version 1 of the headers
                                  (h.PRODUCER_ID, producer_id.encode()),
                                  (h.SEQUENCE, str(seq).encode())])
    assert producer.flush(30) == 0


@pytest.fixture
def sink(stream_config: StreamConfig, tmp_path: Path) -> str:
    from rlmesh_stream.infra.topics import ensure_topics

    ensure_topics(stream_config, partitions=2, replication_factor=1)
    events: list = []
    for session, route in (("s1", PPO), ("s2", PPO), ("s3", SAC)):
        events.append(SessionStartedEvent(session_id=session, route=route, env_id=route.env_id))
    events += [
        _advisory("s1", PPO, Leg.OBSERVATION, AdvisorySeverity.CAUTION, FAKE),
        _advisory("s2", PPO, Leg.OBSERVATION, AdvisorySeverity.CAUTION, FAKE),
        _advisory("s1", PPO, Leg.ACTION, AdvisorySeverity.INFO, CAST),
        _advisory("s3", SAC, Leg.ACTION, AdvisorySeverity.INFO, CAST),
    ]
    events += [SessionEndedEvent(session_id=s, route=r, reason="done", total_steps=1,
                                 total_episodes=1) for s, r in (("s1", PPO), ("s2", PPO),
                                                                ("s3", SAC))]
    _publish(stream_config, events)
    url = f"duckdb://{tmp_path / 'real.duckdb'}"
    run_offline(stream_config, url)
    return url


def test_advisory_groups_from_the_real_builder(sink: str) -> None:
    with open_store(sink) as store:
        rep = advisory_report(store)
    groups = [(r["severity"], r["model_component_id"], r["leg"], r["sessions"])
              for r in rep.rows]
    assert groups == [("caution", "ppo", "observation", 2),
                      ("info", "ppo", "action", 1), ("info", "sac", "action", 1)]
    assert rep.summary["sessions in store"] == 3


def test_fail_on_caution_trips_on_the_real_tables(sink: str) -> None:
    result = CliRunner().invoke(report, ["advisories", "--sink", sink, "--fail-on", "caution"])
    assert result.exit_code == GATE_EXIT_CODE


def test_delivery_report_sees_every_published_record(sink: str) -> None:
    with open_store(sink) as store:
        rep = delivery_report(store)
    assert [(r["records"], r["gaps"], r["duplicates"]) for r in rep.rows] == [(10, 0, 0)]
