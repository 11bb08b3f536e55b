"""`ClientErrors`: the one line a command-line client ends with names the telling error."""

from __future__ import annotations

from confluent_kafka import KafkaError

from rlmesh_stream.schemas.connection.client_errors import ClientErrors

_CLOSED = ("ssl://127.0.0.1:9092/bootstrap: Disconnected: SSL connection closed by peer "
           "(after 1ms in state SSL_HANDSHAKE)")
_GUESSED = ("ssl://127.0.0.1:9092/bootstrap: SSL handshake failed: Disconnected: SSL connection "
            "closed by peer: connecting to a PLAINTEXT broker listener? (after 1ms in state "
            "SSL_HANDSHAKE)")


def test_a_tls_handshake_closed_by_the_peer_names_the_plaintext_listener_guess() -> None:
    errors = ClientErrors()
    errors.on_error(KafkaError(KafkaError._TRANSPORT, _CLOSED))
    assert errors.explain("Failed to get metadata") == (
        f"Failed to get metadata; {_CLOSED} (connecting to a PLAINTEXT broker listener?)")


def test_librdkafkas_own_guess_is_not_repeated() -> None:
    errors = ClientErrors()
    errors.on_error(KafkaError(KafkaError._TRANSPORT, _GUESSED))
    assert errors.explain("Failed to get metadata") == f"Failed to get metadata; {_GUESSED}"


def test_all_brokers_down_does_not_replace_a_more_telling_error() -> None:
    errors = ClientErrors()
    errors.on_error(KafkaError(KafkaError._TRANSPORT, _GUESSED))
    errors.on_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert errors.explain("x") == f"x; {_GUESSED}"


def test_no_error_leaves_the_message_alone() -> None:
    assert ClientErrors().explain("Failed to get metadata") == "Failed to get metadata"
