"""`rlmesh-stream infra up --brokers 3`: three brokers, a quorum of three, RF 3 / min ISR 2."""

from __future__ import annotations

import uuid
from pathlib import Path

from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from rlmesh_stream.infra.cluster import LocalCluster
from rlmesh_stream.schemas.connection.config import StreamConfig
from rlmesh_stream.schemas.contract.topics import EventType
from tests.faults.conftest import ClusterUp


def test_infra_up_brokers_3_prints_where_the_cluster_is(
    cluster_up: tuple[ClusterUp, Path], cluster: LocalCluster,
) -> None:
    up, _ = cluster_up
    assert f"bootstrap:    {cluster.bootstrap}" in up.stdout
    assert f"registry_url: {cluster.registry_url}" in up.stdout
    assert len(cluster.bootstrap.split(",")) == 3


def test_three_brokers_answer_and_the_quorum_has_three_voters(cluster: LocalCluster) -> None:
    assert cluster.live_brokers() == 3
    assert all(len(n.voters.split(",")) == 3 for n in cluster.nodes())


def test_event_topics_get_replication_factor_3_and_min_insync_replicas_2(
    cluster: LocalCluster,
) -> None:
    # ensure_topics picks min(3, live brokers) itself: no replication factor passed here.
    from rlmesh_stream.infra.topics import ensure_topics

    config = StreamConfig(bootstrap=cluster.bootstrap, registry_url=cluster.registry_url,
                          topic_prefix=f"rf{uuid.uuid4().hex[:8]}.rlmesh.runtime")
    ensure_topics(config, partitions=3)
    topic = EventType.STEP_COMPLETED.topic(config.topic_prefix)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "log_level": 0})
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    assert {len(p.replicas) for p in partitions.values()} == {3}
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["min.insync.replicas"].value == "2"
