"""A small DevTools-protocol client for headless Chromium, for rendering tests.

Why not `--dump-dom`: it shows the DOM but not what went wrong while loading it.
Over the DevTools protocol the test sees console errors, uncaught exceptions
and failed loads (the `Log` domain), and can ask the live page questions.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket  # websocket-client

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--remote-debugging-port=0", "--remote-allow-origins=*",
]


def chromium_binary() -> str | None:
    """The Chromium to use: $CHROMIUM, else Debian's /usr/bin/chromium, else on PATH."""
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium"):
        if candidate and Path(candidate).exists():
            return candidate
    return shutil.which("chromium")


@dataclass
class Page:
    """An open tab: its load-time errors and a way to evaluate JavaScript in it."""

    ws: websocket.WebSocket
    errors: list[str] = field(default_factory=list)
    _next_id: int = 0

    def call(self, method: str, params: dict[str, Any] | None = None,
             timeout: float = 20.0) -> dict[str, Any]:
        self._next_id += 1
        msg_id = self._next_id
        self.ws.send(json.dumps({"id": msg_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._receive(deadline)
            if msg is not None and msg.get("id") == msg_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                result: dict[str, Any] = msg.get("result", {})
                return result
        raise TimeoutError(method)

    def wait_for(self, event: str, timeout: float = 20.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self._receive(deadline)
            if msg is not None and msg.get("method") == event:
                params: dict[str, Any] = msg.get("params", {})
                return params
        raise TimeoutError(event)

    def settle(self, seconds: float = 0.5) -> None:
        """Collect the events that arrive in the next `seconds` (late errors)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._receive(deadline)

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression,
                                                "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def _receive(self, deadline: float) -> dict[str, Any] | None:
        self.ws.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            msg: dict[str, Any] = json.loads(self.ws.recv())
        except websocket.WebSocketTimeoutException:
            return None
        self._record_error(msg)
        return msg

    def _record_error(self, msg: dict[str, Any]) -> None:
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.errors.append("console: " + " ".join(
                str(a.get("value", a.get("description"))) for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            self.errors.append("exception: " + json.dumps(params.get("exceptionDetails")))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"log ({entry.get('source')}): {entry.get('text')} "
                               f"{entry.get('url', '')}")


class Chromium:
    """One headless Chromium process with its own throwaway profile."""

    def __init__(self, binary: str) -> None:
        self.profile = tempfile.mkdtemp(prefix="rlmesh-chromium-")
        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={self.profile}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.port = self._wait_for_port()

    def _wait_for_port(self, timeout: float = 30.0) -> int:
        marker = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with status {self.proc.returncode}")
            if marker.exists():
                first = marker.read_text().splitlines()[:1]
                if first and first[0].isdigit():
                    return int(first[0])
            time.sleep(0.1)
        raise TimeoutError("chromium did not open its DevTools port")

    @contextmanager
    def open(self, url: str) -> Iterator[Page]:
        """Open `url` in a new tab, with error collection on from before the load."""
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(req, timeout=10) as resp:
            target = json.load(resp)
        ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=20,
                                         suppress_origin=True)
        page = Page(ws)
        try:
            for domain in ("Page", "Runtime", "Log"):
                page.call(f"{domain}.enable")
            page.call("Page.navigate", {"url": url})
            page.wait_for("Page.loadEventFired")
            page.settle()
            yield page
        finally:
            ws.close()

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.profile, ignore_errors=True)
