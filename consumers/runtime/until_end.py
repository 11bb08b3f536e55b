"""The stop rule of an offline run (--until-end): the run starts only if Kafka answers
and one of its topics exists, and stops once every partition it holds is read up to the
end offset seen at assignment and checkpointed, or, holding none, once the group has
settled with every partition owned by another member.

With `whole_sessions` the end is the group's: every partition of the topics read to its
high watermark at start (`group_ends`), the partitions other members hold as the sink's
stored offsets say (`others_read_to_end`); a member holding none ends once they are."""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException

from rlmesh_stream.consumers.runtime.errors import ConsumerError
from rlmesh_stream.consumers.runtime.kafka_io import (
    SESSION_TIMEOUT_MS,
    ConsumerErrors,
    existing_topics,
    high_watermarks,
)
from rlmesh_stream.consumers.runtime.options import RuntimeOptions
from rlmesh_stream.consumers.runtime.policy import CheckpointPolicy
from rlmesh_stream.consumers.runtime.records import TP
from rlmesh_stream.consumers.sinks import Sink
from rlmesh_stream.schemas.connection.config import StreamConfig

log = logging.getLogger(__name__)


def kafka_unreachable(bootstrap: str, timeout: float, exc: KafkaException,
                      last: str | None = None) -> ConsumerError:
    """The error of an offline run whose Kafka did not answer within `timeout` seconds;
    `last` is the client's last error line (it says why: refused, TLS, SASL, ...)."""
    err = exc.args[0] if exc.args else exc
    return ConsumerError(
        f"cannot reach Kafka at {bootstrap} within {timeout:g} s "
        f"({err.str() if isinstance(err, KafkaError) else err}"
        f"{'; ' + last if last else ''}): check --bootstrap and --security-protocol")


class UntilEnd:
    """When an offline run may start, and when it is done."""

    def __init__(self, config: StreamConfig, options: RuntimeOptions, topics: list[str],
                 policy: CheckpointPolicy, sink: Sink) -> None:
        self.config, self.options, self.topics = config, options, topics
        self.policy, self.sink = policy, sink
        self.first_assigned_at: float | None = None  # monotonic time of the first assignment
        self.joined_at: float | None = None  # monotonic time the group was joined (subscribed)
        # holding no partitions: the last look at the group (whole_sessions: at the sink)
        self._idle_checked_at = 0.0
        self._admin: Any = None  # AdminClient describing the group, made when first needed

    def check_topics(self, consumer: Consumer, errors: ConsumerErrors) -> None:
        """Kafka answers and at least one of the topics exists, or an error.

        Without it an offline run waits forever for an assignment that cannot come: a
        broker that is not there, or a topic prefix no producer has written under."""
        timeout = self.config.connect_timeout
        try:
            found = existing_topics(consumer, self.topics, timeout)
        except KafkaException as exc:
            errors.quiet = True
            consumer.poll(0)  # serves the queued client errors: the last one says why
            raise kafka_unreachable(self.config.bootstrap, timeout, exc,
                                    errors.last) from exc
        if not found:
            raise ConsumerError(
                f"none of the {len(self.topics)} topics under prefix "
                f"{self.config.topic_prefix!r} exists in Kafka at {self.config.bootstrap} "
                f"(e.g. {self.topics[0]}): check --topic-prefix, and that producers have "
                "published or `rlmesh-stream topics create` has run")

    def group_ends(self, consumer: Consumer) -> dict[TP, int]:
        """whole_sessions: every partition of the topics and its end at start (its high
        watermark, what the consumer reads up to), or an error."""
        ends = high_watermarks(consumer, self.topics, self.config.connect_timeout)
        if not ends:
            raise ConsumerError(f"cannot list the end offsets of the topics under "
                                f"{self.config.topic_prefix!r} at "
                                f"{self.config.bootstrap}; run again")
        return ends

    def assigned(self) -> bool:
        """A rebalance gave this process its partitions (even none): whether it is the
        first (or the first since a loss made this process a newcomer)."""
        if self.first_assigned_at is None:
            self.first_assigned_at = time.monotonic()
            return True
        return False

    def others_read_to_end(self, others: list[TP]) -> bool:
        """whole_sessions: the partitions `others` (held by other members) read to their
        ends at start, as the sink's stored offsets say (asked once a second at most, and
        not while a checkpoint is being written)."""
        if self.policy.writer.busy:
            return False
        now = time.monotonic()
        if now - self._idle_checked_at < 1.0:  # ask the sink once a second at most
            return False
        self._idle_checked_at = now
        stored = self.sink.group_offsets()
        if stored is None:  # this sink cannot tell
            return False
        ends = self.policy.offsets.group_ends
        return all(stored.get(k, -1) >= ends[k] for k in others)

    def done(self, consumer: Consumer) -> bool:
        """Read to the end and all of it cut, or nothing to read in this process."""
        return self.policy.at_end() or self._idle_and_settled(consumer)

    def _settle_time(self) -> float:
        """Holding nothing: how long the group may settle (default: three session
        timeouts)."""
        if self.options.settle_time is not None:
            return self.options.settle_time
        timeout = self.options.kafka_overrides.get("session.timeout.ms", SESSION_TIMEOUT_MS)
        return 3 * int(timeout) / 1000

    def _idle_and_settled(self, consumer: Consumer) -> bool:
        """In a process that holds no partitions: stop once the group has settled
        (`settle_time` after the first assignment) with every partition of the topics
        owned by another member. There is nothing left for this process to read.

        The assignment is eager (range): a newcomer is assigned only once every member
        has given its partitions back, so a member that does not (its loop held up past
        `settle_time`) holds the newcomer too; then `settle_time` counts from the join,
        and the newcomer, given nothing yet, stops the same way."""
        since = self.first_assigned_at or self.joined_at
        if (self.policy.offsets.assigned or self.policy.buffer or since is None
                or self.options.whole_sessions):  # there, `Offsets.read_to_end` says it
            return False
        now = time.monotonic()
        if now - since < self._settle_time():
            return False
        if now - self._idle_checked_at < 1.0:  # look at the group once a second at most
            return False
        self._idle_checked_at = now
        owners = self._partition_owners(consumer)
        if owners is None:
            return False
        log.warning("holding no partitions %.0fs after joining group %s: all %d partitions "
                    "of its topics are owned by %d other member(s); nothing to read, stopping",
                    now - since, self.options.group_id, len(owners),
                    len(set(owners.values())))
        return True

    def _partition_owners(self, consumer: Consumer) -> dict[TP, str] | None:
        """The owning member of every partition of the topics, or None while any partition
        is unowned, owned by this process, unknown, or the group cannot be described."""
        from confluent_kafka.admin import AdminClient

        try:
            metadata = existing_topics(consumer, self.topics, timeout=10)
            wanted: set[TP] = set()
            for topic in self.topics:
                meta = metadata.get(topic)
                if meta is None or meta.error is not None or not meta.partitions:
                    return None
                wanted |= {(topic, p) for p in meta.partitions}
            if self._admin is None:
                self._admin = AdminClient(self.config.kafka_config())
            group = self.options.group_id
            described = self._admin.describe_consumer_groups([group], request_timeout=10)[group]
            members = described.result(timeout=15).members
        except Exception as exc:  # the group or metadata cannot be read now: look again later
            log.debug("cannot describe group %s (%s)", self.options.group_id, exc)
            return None
        me = consumer.memberid()
        owners: dict[TP, str] = {}
        for member in members:
            if member.member_id == me:
                continue
            assignment = member.assignment.topic_partitions if member.assignment else []
            for tp in assignment:
                owners[(tp.topic, tp.partition)] = member.member_id
        if not wanted <= owners.keys():
            return None
        return {tp: owners[tp] for tp in wanted}
