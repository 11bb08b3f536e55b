"""The schema registry behind nginx: TLS, HTTP basic auth, a per-user allow-list of requests.

Apicurio Registry has no authentication of its own without an OIDC server, so the secured
stack (`security`) binds it to loopback and puts this proxy in front of it; see
`nginx_rules` for what each user may do. Refusals are JSON in the Confluent error format,
so clients show which user may not do what.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from rlmesh_stream.infra.pki import Credentials, Pki, write_private
from rlmesh_stream.infra.registry import CCOMPAT_PATH


def nginx_rules(topic_prefix: str) -> list[tuple[str, str, str]]:
    """(user, methods, path regex under the ccompat API) of the requests the proxy lets through.

    Decoding needs reads of schemas by id and of subjects' versions; registering
    needs, for `producer` only, POST under the event subjects (and the shared
    `rlmesh/...proto` reference subjects protobuf schemas import) and PUT of
    those subjects' compatibility. Nobody may DELETE, or change global config,
    through the proxy.
    """
    prefix = topic_prefix.replace(".", "\\.")
    event_subject = f"{prefix}\\.[a-z_]+-value"
    reads = "/(subjects|schemas|config|mode)(/.*)?"
    return [
        ("producer", "GET", reads),
        ("producer", "POST", f"/subjects/({event_subject}|rlmesh/[a-z0-9_/]+\\.proto)(/.*)?"),
        ("producer", "PUT", f"/config/{event_subject}"),
        ("consumer", "GET", reads),
    ]


@dataclass(frozen=True)
class RegistryProxy:
    """nginx in front of the registry: TLS, basic auth, a per-user allow-list of requests."""

    home: Path
    port: int
    upstream_port: int
    pki: Pki
    users: dict[str, Credentials] = field(repr=False)
    topic_prefix: str = "rlmesh.runtime"
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}{CCOMPAT_PATH}"

    @property
    def log_file(self) -> Path:
        return self.home / "error.log"

    def write_config(self) -> Path:
        self.home.mkdir(parents=True, exist_ok=True)
        htpasswd = self.home / "htpasswd"
        write_private(htpasswd, "".join(
            f"{c.username}:{_sha512_crypt(c.password)}\n" for c in self.users.values()))
        # Run as root, nginx would switch its workers to `nobody`, who cannot read a
        # 0600 htpasswd in a private temp dir; they keep the invoking user instead.
        user = "user root;" if os.geteuid() == 0 else ""
        rules = "\n".join(
            f'        "~^{user} ({methods}) {CCOMPAT_PATH}{path}$" 1;'
            for user, methods, path in nginx_rules(self.topic_prefix))
        # nginx unescapes \" inside a double-quoted string: the body is JSON in the
        # Confluent error format, so clients show `message` as the error.
        deny = ('\\"error_code\\":40301,\\"message\\":\\"registry user \'$remote_user\' '
                'may not $request_method $uri\\"')
        unauth = ('\\"error_code\\":40101,\\"message\\":\\"registry authentication '
                  'failed for user \'$remote_user\'\\"')
        conf = f"""
{user}
worker_processes 1;
pid {self.home}/nginx.pid;
error_log {self.log_file} warn;
events {{ worker_connections 256; }}
http {{
    access_log {self.home}/access.log;
    client_body_temp_path {self.home}/tmp-body;
    proxy_temp_path {self.home}/tmp-proxy;
    fastcgi_temp_path {self.home}/tmp-fastcgi;
    uwsgi_temp_path {self.home}/tmp-uwsgi;
    scgi_temp_path {self.home}/tmp-scgi;
    map "$remote_user $request_method $uri" $allowed {{
        default 0;
{rules}
    }}
    server {{
        listen {self.host}:{self.port} ssl;
        ssl_certificate {self.pki.server_cert};
        ssl_certificate_key {self.pki.server_key};
        client_max_body_size 16m;
        auth_basic "rlmesh-stream schema registry";
        auth_basic_user_file {htpasswd};
        error_page 401 = @unauthorised;
        location @unauthorised {{
            default_type application/json;
            add_header WWW-Authenticate 'Basic realm="rlmesh-stream schema registry"' always;
            return 401 "{{{unauth}}}";
        }}
        location {CCOMPAT_PATH}/ {{
            default_type application/json;
            # The rewrite phase runs before auth_basic: ask for credentials first.
            if ($remote_user = "") {{
                return 401;
            }}
            if ($allowed = 0) {{
                return 403 "{{{deny}}}";
            }}
            proxy_pass http://{self.host}:{self.upstream_port};
            proxy_set_header Authorization "";
        }}
        location / {{
            default_type application/json;
            return 403 "{{{deny}}}";
        }}
    }}
}}
"""
        path = self.home / "nginx.conf"
        path.write_text(conf)
        return path

    def command(self) -> list[str]:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        return [nginx, "-p", str(self.home), "-c", str(self.home / "nginx.conf"),
                "-e", str(self.log_file), "-g", "daemon off;"]


def _sha512_crypt(password: str) -> str:
    """A `$6$` hash nginx's auth_basic accepts; the password goes to openssl on stdin."""
    done = subprocess.run(["openssl", "passwd", "-6", "-stdin"], input=password,
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


def nginx_available() -> bool:
    return shutil.which("nginx") is not None or Path("/usr/sbin/nginx").exists()
