"""The command-line options and epilogue of every command reading through `ConsumerRuntime`.

`consume <builder>` and `export trajectories` read the topics the same way (a
consumer group, where to start, when to stop, how often to checkpoint, where
dead letters go), so they take the same options with the same checks, declared
once here, and end the same way: warnings logged to stderr while they run, and one
line counting the records sent to the dead-letter topic. A library a command needs
that is not installed is left to the root command (`infra/cli.py`), which names the
extra. Light on purpose: importing it pulls in click only, so a command can still
report a missing extra before it imports the runtime.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import click

from rlmesh_stream.schemas.cli_values import NON_NEGATIVE, POSITIVE, Text
from rlmesh_stream.schemas.connection.cli_options import (
    SharedOption,
    shared_options_last,
    topic_name_callback,
)

F = TypeVar("F", bound=Callable[..., Any])

MAX_BATCH_LIMIT = 1_000_000
"""The most records one checkpoint may hold: they are all in memory until it commits."""

# The options' parameter names, as `RuntimeOptions` spells its fields.
READING_FIELDS = ("group_id", "from_beginning", "until_end", "settle_time",
                  "checkpoint_interval", "max_batch", "dlq_topic")


class Ran(Protocol):
    """What a reading command returns: the runtime it ran (None when it was interrupted)."""

    dead_letters: int


def _check_dlq_topic(topic: str | None, config: Any) -> None:
    """Refuse an event topic as the dead-letter topic (its letters would loop for ever)."""
    if topic is None or config is None:
        return
    from rlmesh_stream.consumers.deadletter import check_dead_letter_topic

    try:
        check_dead_letter_topic(topic, config.topic_prefix)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--dlq-topic'") from None


# A reading option: listed after a command's own options, before the connection ones.
shared_option = functools.partial(click.option, cls=SharedOption)


def reading_options(*, default_group: str, store: str, until_end_help: str) -> Callable[[F], F]:
    """Add the reading options to a command; it receives them as one dict, `reading`.

    `reading` holds `RuntimeOptions` keyword arguments (`group_id` None when not given:
    the command knows its default, described by `default_group`); `--quiet` stays a
    parameter of its own, since the runtime does not take it. Warnings are logged to
    stderr from the start, and the runtime the command returns (a `Ran`) is reported on:
    the records it dead-lettered, in one line.
    """
    options = [
        shared_option("--group", "group_id", default=None, type=Text(),
                     help=f"Consumer group id [default: {default_group}]"),
        shared_option("--from-beginning", is_flag=True,
                     help=f"Start partitions the {store} has no offset for at the earliest "
                          "record [default: where it ended when the process started; "
                          "a topic or partition created later, from its first record]."),
        shared_option("--until-end", is_flag=True, help=until_end_help),
        shared_option("--settle-time", default=None, type=NON_NEGATIVE,
                     help="--until-end: a process holding no partitions this many seconds "
                          "after joining, while the group's other members own them all, "
                          "stops [default: three session timeouts, 30 s]."),
        shared_option("--checkpoint-interval", default=1.0, show_default=True,
                     type=POSITIVE,
                     help=f"Seconds between checkpoints (one {store} commit each)."),
        shared_option("--max-batch", default=20_000, show_default=True,
                     type=click.IntRange(1, MAX_BATCH_LIMIT),
                     help="Records per checkpoint at most (held in memory until it commits)."),
        shared_option("--dlq-topic", default=None, type=Text(), callback=topic_name_callback,
                     help="Dead-letter topic [default: <prefix>.dlq]"),
        shared_option("--quiet", is_flag=True, help="No progress output."),
    ]

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def with_reading(*args: Any, **kwargs: Any) -> Any:
            logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                                format="%(asctime)s %(levelname)s %(name)s: %(message)s")
            reading = {name: kwargs.pop(name) for name in READING_FIELDS}
            _check_dlq_topic(reading["dlq_topic"], kwargs.get("config"))
            ran: Ran | None = command(*args, reading=reading, **kwargs)
            if ran is not None and ran.dead_letters:
                n = ran.dead_letters
                click.echo(f"{n} record{'' if n == 1 else 's'} that could not be applied sent "
                           "to the dead-letter topic (each one's reason in its "
                           "rlmesh.dlq.error header)", err=True)
            return ran

        decorated: Any = with_reading
        for option in reversed(options):
            decorated = option(decorated)
        return shared_options_last(decorated)  # type: ignore[return-value]

    return decorate
