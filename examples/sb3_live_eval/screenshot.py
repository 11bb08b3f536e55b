"""A PNG of TensorBoard's Scalars tab from headless Chromium, for the docs.

`chromium --screenshot` cannot change a setting the page keeps in localStorage, and the
Scalars tab's "Ignore outliers in chart scaling" (on by default) crops an eval curve that
jumps from 230 to 500. So this drives Chromium through its DevTools protocol: open the page,
turn the setting off, reload, wait for the charts, capture. Needs `websocket-client`
(in rlmesh-stream's `test` extra).

    python screenshot.py out.png [--url URL] [--wait 15]
"""

from __future__ import annotations

import argparse
import base64
import json
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import websocket

URL = ("http://127.0.0.1:26006/#scalars&tagFilter=eval%2Fmean_reward%7Ctrain%2Floss"
       "&_smoothingWeight=0")
PORT = 29222


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--url", default=URL)
    parser.add_argument("--wait", type=float, default=15.0, help="seconds for the charts")
    parser.add_argument("--size", default="1400x560")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))

    profile = tempfile.mkdtemp()
    browser = subprocess.Popen(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={profile}", f"--remote-debugging-port={PORT}",
         "about:blank"], stderr=subprocess.DEVNULL)
    try:
        targets: list[dict[str, Any]] = []
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/json") as r:
                    targets = json.load(r)
                break
            except OSError:
                time.sleep(0.2)
        page = next(t for t in targets if t["type"] == "page")
        ws = websocket.create_connection(page["webSocketDebuggerUrl"], suppress_origin=True)
        ids = iter(range(1, 1_000_000))

        def call(method: str, **params: Any) -> Any:
            n = next(ids)
            ws.send(json.dumps({"id": n, "method": method, "params": params}))
            while True:
                message = json.loads(ws.recv())
                if message.get("id") == n:
                    return message.get("result")

        call("Emulation.setDeviceMetricsOverride", width=width, height=height,
             deviceScaleFactor=1, mobile=False)
        call("Page.navigate", url=args.url)
        time.sleep(3)
        call("Runtime.evaluate", expression="localStorage.setItem('_ignoreYOutliers', 'false')")
        call("Page.reload")
        time.sleep(args.wait)
        shot = call("Page.captureScreenshot", format="png")
        args.out.write_bytes(base64.b64decode(shot["data"]))
        ws.close()
    finally:
        browser.terminate()
        browser.wait()


if __name__ == "__main__":
    main()
