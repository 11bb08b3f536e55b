"""Publishing through `KafkaRuntimeHooks` on the real stack: what lands, where, with what."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from rlmesh_stream.producer.config import DeliveryFailure
from rlmesh_stream.schemas.contract import events as ev
from rlmesh_stream.schemas.contract import headers as h
from rlmesh_stream.schemas.contract.topics import EventType
from tests.producer.producer_helpers import read_back
from tests.producer.producer_samples import CALLBACK, action, observation, one_of_each, step

pytestmark = pytest.mark.stack


def test_every_event_type_lands_in_its_topic_keyed_by_session_decodable_with_headers(
    make_hooks, stream_config,
):
    hooks = make_hooks()
    session = str(uuid.uuid4())
    sent = one_of_each(session)
    for et, event in sent.items():
        getattr(hooks, CALLBACK[et])(event)
    assert hooks.flush(15) == 0

    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=len(sent))

    assert len(landed) == len(sent)
    by_type = {r.event_type: r for r in landed}
    assert set(by_type) == set(EventType)
    for et, record in by_type.items():
        assert record.topic == et.topic(stream_config.topic_prefix)
        assert record.key == session.encode()
        assert record.event == sent[et]
        # Contract version 2: one packed header, producer id and sequence; the event type is
        # the topic's (version 1's four headers are read, not written).
        assert set(record.headers) == {h.PRODUCER_SEQUENCE}
        assert record.headers[h.PRODUCER_SEQUENCE] == b"%s:%d" % (
            hooks.producer_id.encode(), record.sequence)
        assert record.producer_id == hooks.producer_id
        assert h.LEAVES_OMITTED_BYTES not in record.headers


def test_every_event_type_also_round_trips_in_the_protobuf_format(make_hooks, stream_config):
    hooks = make_hooks(format="protobuf")
    session = str(uuid.uuid4())
    sent = one_of_each(session)
    for et, event in sent.items():
        getattr(hooks, CALLBACK[et])(event)
    assert hooks.flush(15) == 0

    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=len(sent))

    assert {r.event_type: r.event for r in landed} == sent


def test_sequence_numbers_run_from_zero_without_gaps_in_accept_order(make_hooks, stream_config):
    hooks = make_hooks()
    session = str(uuid.uuid4())
    for i in range(50):
        hooks.step_completed(step(session, i))
    hooks.flush(15)

    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=50)

    assert [r.sequence for r in landed] == list(range(50))
    assert [r.event.step for r in landed] == list(range(50))


def test_two_hooks_in_one_process_have_distinct_producer_ids(make_hooks):
    assert make_hooks().producer_id != make_hooks().producer_id


def test_stats_count_every_accepted_event_as_delivered(make_hooks):
    hooks = make_hooks()
    session = str(uuid.uuid4())
    for i in range(20):
        hooks.step_completed(step(session, i))
    hooks.flush(15)

    stats = hooks.stats()

    assert (stats.accepted, stats.delivered, stats.in_flight, stats.spooled) == (20, 20, 0, 0)
    assert stats.failed == {} and stats.dropped == 0
    assert stats.delivered_bytes > 0


def test_a_disabled_event_type_is_neither_published_nor_accepted(make_hooks, stream_config):
    hooks = make_hooks(disabled_events={EventType.OBSERVATION_EMITTED})
    session = str(uuid.uuid4())
    hooks.observation_emitted(observation(session))
    hooks.step_completed(step(session))
    hooks.flush(15)

    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=2, timeout=3)

    assert [r.event_type for r in landed] == [EventType.STEP_COMPLETED]
    assert hooks.stats().disabled == 1
    assert hooks.stats().accepted == 1


def test_leaves_above_the_cap_are_omitted_and_flagged_with_their_size(make_hooks, stream_config):
    hooks = make_hooks(leaves_max_bytes=1000)
    session = str(uuid.uuid4())
    big = [bytes(600), bytes(300)]  # 900 bytes per payload, observation + raw = 1800
    small = [bytes(100)]
    hooks.observation_emitted(observation(session, 1, leaves=big))
    hooks.observation_emitted(observation(session, 2, leaves=small))
    hooks.flush(15)

    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=2)

    capped, kept = sorted(landed, key=lambda r: r.event.step)
    assert capped.event.observation is None and capped.event.raw_observation is None
    assert capped.headers[h.LEAVES_OMITTED_BYTES] == b"1800"
    assert kept.event.observation == small
    assert h.LEAVES_OMITTED_BYTES not in kept.headers
    assert hooks.stats().leaves_omitted == 1


def test_leaves_keep_their_boundaries(make_hooks, stream_config):
    hooks = make_hooks()
    leaves = [b"ab", b"", b"cde"]
    hooks.observation_emitted(observation(str(uuid.uuid4()), 1, leaves=leaves))
    hooks.flush(15)

    (record,) = read_back(stream_config.bootstrap, stream_config.registry_url,
                          stream_config.topic_prefix, expected=1)

    assert record.event.observation == leaves


def test_the_transforms_return_the_payload_unchanged(make_hooks):
    hooks = make_hooks()
    obs = observation(str(uuid.uuid4()))
    act = action(str(uuid.uuid4()))

    assert hooks.transform_observation(obs) is obs.observation
    assert hooks.transform_action(act) is act.action


def test_an_event_the_contract_cannot_carry_is_counted_failed_and_reported_not_raised(
    make_hooks,
):
    failures: list[DeliveryFailure] = []
    hooks = make_hooks(on_error=failures.append)
    bad = step(str(uuid.uuid4()))
    bad.env_index = 2**40  # an i32 in the contract

    hooks.step_completed(bad)

    stats = hooks.stats()
    assert stats.accepted == 1 and stats.failed_total == 1
    assert [f.event_type for f in failures] == ["step_completed"]
    assert failures[0].reason.startswith("contract:")


def test_a_record_kafka_refuses_is_counted_failed_with_its_reason_and_reported_not_raised(
    make_hooks,
):
    failures: list[DeliveryFailure] = []
    hooks = make_hooks(on_error=failures.append, leaves_max_bytes=None)
    too_big = observation(str(uuid.uuid4()), 1, leaves=[bytes(3 * 1024 * 1024)])

    hooks.observation_emitted(too_big)
    hooks.flush(15)

    stats = hooks.stats()
    assert stats.failed == {"MSG_SIZE_TOO_LARGE": 1} and stats.delivered == 0
    assert [(f.event_type, f.sequence, f.reason) for f in failures] == [
        ("observation_emitted", 0, "MSG_SIZE_TOO_LARGE")]


def test_a_session_lands_on_the_same_partition_in_every_topic_as_javas_murmur2(
    make_hooks, stream_config,
):
    partitions = 6
    admin = AdminClient({"bootstrap.servers": stream_config.bootstrap})
    topics = [et.topic(stream_config.topic_prefix) for et in EventType]
    for future in admin.create_topics(
            [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics]
    ).values():
        future.result(30)
    hooks = make_hooks()
    sessions = [str(uuid.uuid4()) for _ in range(12)]
    for session in sessions:
        for et, event in one_of_each(session).items():
            if et not in (EventType.SESSION_ENDED, EventType.SESSION_FAILED):
                getattr(hooks, CALLBACK[et])(event)
    hooks.flush(20)

    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=12 * 11, decode=False)

    assert len(landed) == 12 * 11
    for record in landed:
        assert record.partition == java_partition(record.key, partitions)
    assert len({r.partition for r in landed}) > 1  # the keys really spread


def test_session_ended_flushes_before_returning(make_hooks):
    hooks = make_hooks(linger_ms=1000)
    session = str(uuid.uuid4())
    for i in range(10):
        hooks.step_completed(step(session, i))

    hooks.session_ended(ev.SessionEndedEvent(
        session_id=session, route=one_of_each(session)[EventType.ENV_CONNECTED].route,
        reason="completed", total_steps=10, total_episodes=0))

    assert hooks.stats().delivered == 11


def test_callbacks_are_safe_from_several_threads(make_hooks, stream_config):
    import threading

    hooks = make_hooks()
    sessions = [str(uuid.uuid4()) for _ in range(4)]

    def emit(session: str) -> None:
        for i in range(250):
            hooks.step_completed(step(session, i))

    threads = [threading.Thread(target=emit, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    hooks.flush(20)

    landed = read_back(stream_config.bootstrap, stream_config.registry_url,
                       stream_config.topic_prefix, expected=1000, decode=False)

    assert sorted(r.sequence for r in landed) == list(range(1000))
    assert hooks.stats().delivered == 1000


def java_partition(key: bytes, partitions: int) -> int:
    """Kafka's Java default partitioner for a keyed record: toPositive(murmur2(key)) % n."""
    return (_murmur2(key) & 0x7FFFFFFF) % partitions


def _murmur2(data: bytes) -> int:
    length = len(data)
    seed = 0x9747B28C
    m = 0x5BD1E995
    r = 24
    h32 = (seed ^ length) & 0xFFFFFFFF
    length4 = length // 4
    for i in range(length4):
        i4 = i * 4
        k = int.from_bytes(data[i4:i4 + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h32 = (h32 * m) & 0xFFFFFFFF
        h32 ^= k
    rest = length % 4
    tail = length & ~3
    if rest == 3:
        h32 ^= data[tail + 2] << 16
    if rest >= 2:
        h32 ^= data[tail + 1] << 8
    if rest >= 1:
        h32 ^= data[tail]
        h32 = (h32 * m) & 0xFFFFFFFF
    h32 ^= h32 >> 13
    h32 = (h32 * m) & 0xFFFFFFFF
    h32 ^= h32 >> 15
    return h32


def test_the_reference_murmur2_matches_kafkas_known_vectors():
    # Values from Kafka's UtilsTest.testMurmur2 (as signed ints).
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
             bytes([ord("a"), ord("b"), ord("c")]): 479470107}
    for data, expected in cases.items():
        assert np.int32(np.uint32(_murmur2(data))) == expected
