"""A schema registry that refuses the hook (401, 403) is reported as refusing, not unreachable.

The shared registry is put behind the project's authenticating nginx proxy
(`rlmesh_stream.infra.security.RegistryProxy`: TLS, basic auth, a per-user allow-list), on
a free port, for this module only: `producer` may register the event
schemas under this module's prefix, `consumer` may only read.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest

from rlmesh_stream.infra import proc
from rlmesh_stream.infra.security import Credentials, RegistryProxy, make_pki, nginx_available
from rlmesh_stream.schemas.connection.config import StreamConfig
from tests.producer.producer_samples import step

pytestmark = pytest.mark.stack


@dataclass(frozen=True)
class Proxied:
    proxy: RegistryProxy
    bootstrap: str
    topic_prefix: str

    def config(self, user: str, password: str) -> StreamConfig:
        return StreamConfig(bootstrap=self.bootstrap, registry_url=self.proxy.url,
                            topic_prefix=self.topic_prefix, registry_username=user,
                            registry_password=password,
                            registry_ca_location=str(self.proxy.pki.ca_cert))


@pytest.fixture(scope="module")
def proxied(stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    if not nginx_available():
        pytest.skip("nginx is not installed (apt-get install nginx-light)")
    home = Path(tmp_path_factory.mktemp("registry-proxy"))
    registry = urlparse(stack.registry_url)
    prefix = f"t{uuid.uuid4().hex[:10]}.rlmesh.runtime"
    users = {n: Credentials.generate(n) for n in ("producer", "consumer")}
    proxy = RegistryProxy(home / "proxy", proc.free_port(), registry.port or 80,
                          make_pki(home / "pki"), users, prefix)
    proxy.write_config()
    pid = proc.spawn_detached(proxy.command(), proxy.home, proxy.home / "nginx.out")
    try:
        deadline = time.monotonic() + 30
        while not proc.port_open(proxy.port) and time.monotonic() < deadline:
            assert proc.is_alive(pid), (proxy.home / "nginx.out").read_text()
            time.sleep(0.1)
        yield Proxied(proxy, stack.bootstrap, prefix)
    finally:
        proc.stop(pid, timeout=10)


def _hook_log(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "rlmesh_stream.producer.hooks"]


def _run_refused(make_hooks, config: StreamConfig, caplog) -> list[logging.LogRecord]:
    caplog.set_level(logging.DEBUG, logger="rlmesh_stream.producer.hooks")
    hooks = make_hooks(config=config, startup_wait_s=0.5)
    hooks.step_completed(step(str(uuid.uuid4()), 0))
    time.sleep(4)  # several attempts (0.2, 0.5, 1, 2 s apart), all refused
    assert not hooks.schemas_ready and hooks.stats().spooled == 1
    return _hook_log(caplog)


def _the_refusal(said: list[logging.LogRecord], caplog, password: str) -> str:
    """The one ERROR line saying the registry refused; never 'unreachable', never the password."""
    refused = [r for r in said if "refused" in r.getMessage()]
    assert len(refused) == 1 and refused[0].levelno == logging.ERROR
    assert not [r for r in said if "unreachable" in r.getMessage()]
    assert not [r for r in caplog.records if password in r.getMessage()]
    return refused[0].getMessage()


def test_a_wrong_registry_password_is_logged_once_as_refused_naming_the_user_not_unreachable(
    proxied: Proxied, make_hooks, caplog,
):
    password = "not-" + proxied.proxy.users["producer"].password
    said = _run_refused(make_hooks, proxied.config("producer", password), caplog)

    message = _the_refusal(said, caplog, password)
    assert "HTTP 401" in message and "authentication failed" in message
    assert "registry user 'producer'" in message
    assert "-value" in message  # the request: registering an event type's subject


def test_a_registry_user_without_the_right_is_logged_once_as_not_authorised_naming_the_request(
    proxied: Proxied, make_hooks, caplog,
):
    password = proxied.proxy.users["consumer"].password
    said = _run_refused(make_hooks, proxied.config("consumer", password), caplog)

    message = _the_refusal(said, caplog, password)
    assert "HTTP 403" in message and "not authorised" in message
    assert "registry user 'consumer'" in message
    assert "may not POST" in message  # the registry's own account of the request
