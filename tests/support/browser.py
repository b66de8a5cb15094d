"""A page opened in a real browser: headless Chromium (Debian's ``chromium``) driven over the DevTools
protocol on a loopback websocket.

:func:`open_page` loads a file, waits for its load event, and returns what a test needs: the DOM
as the browser built it (``document.documentElement.outerHTML`` and element counts by CSS
selector), every console error and uncaught exception the page produced, a full-page screenshot
(PNG) and the page printed on A4 (PDF). ``scripts/install-chromium`` installs the browser;
``make test`` runs it first. Without it the tests fail saying so: a silent skip would let a
broken page through.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import websocket

_LISTENING = re.compile(r"DevTools listening on (ws://127\.0\.0\.1:(\d+)/\S+)")
INSTALL_HINT = "headless Chromium is missing; fix: run scripts/install-chromium (make test runs it)"


def chromium() -> str:
    found = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        raise AssertionError(INSTALL_HINT)
    return found


@dataclass
class Page:
    dom: str
    counts: dict[str, int]
    errors: list[str] = field(default_factory=list)
    screenshot: bytes = b""
    pdf: bytes = b""
    load_ms: float = 0.0  # navigation start to the end of the load event, as the browser timed it


class _Cdp:
    """One DevTools session: numbered commands, events kept in arrival order."""

    def __init__(self, url: str) -> None:
        self.ws = websocket.create_connection(url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self.events.append(message)

    def wait_event(self, method: str, seconds: float = 30.0) -> None:
        deadline = time.monotonic() + seconds
        while not any(e.get("method") == method for e in self.events):
            if time.monotonic() > deadline:
                raise AssertionError(f"no {method} within {seconds:.0f} s")
            self.events.append(json.loads(self.ws.recv()))

    def close(self) -> None:
        self.ws.close()


def _errors(events: Sequence[dict[str, Any]]) -> list[str]:
    out = []
    for e in events:
        params = e.get("params", {})
        if e.get("method") == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            out.append(f"exception: {details.get('exception', {}).get('description') or details.get('text')}")
        elif e.get("method") == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            out.append("console.error: " + " ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif e.get("method") == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            out.append(f"log: {params['entry'].get('text')}")
    return out


def _start(profile: str) -> tuple[subprocess.Popen[str], str, threading.Thread]:
    proc = subprocess.Popen(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", f"--user-data-dir={profile}",
         "--window-size=1280,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found: list[str] = []
    done = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            m = _LISTENING.search(line)
            if m and not found:
                found.append(m.group(2))
                done.set()
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if not done.wait(60) or not found:
        _stop(proc, reader)
        raise AssertionError("chromium did not open its DevTools port within 60 s")
    return proc, found[0], reader


def _stop(proc: subprocess.Popen[str], reader: threading.Thread) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    reader.join(10)
    if proc.stderr is not None:
        proc.stderr.close()


def open_page(path: Path, selectors: Sequence[str] = ()) -> Page:
    """Load ``path`` in headless Chromium and read back the DOM, errors, a screenshot and an A4 print."""
    profile = tempfile.mkdtemp(prefix="deploy-suite-chromium-")
    proc, port, reader = _start(profile)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            targets = json.loads(answer.read())
        url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
        cdp = _Cdp(url)
        try:
            for domain in ("Page", "Runtime", "Log"):
                cdp.call(f"{domain}.enable")
            cdp.call("Page.navigate", url=path.resolve().as_uri())
            cdp.wait_event("Page.loadEventFired")
            dom = cdp.call("Runtime.evaluate", expression="document.documentElement.outerHTML",
                           returnByValue=True)["result"]["value"]
            counts = {s: cdp.call("Runtime.evaluate", expression=f"document.querySelectorAll({json.dumps(s)}).length",
                                  returnByValue=True)["result"]["value"] for s in selectors}
            load_ms = cdp.call("Runtime.evaluate", returnByValue=True,
                               expression="performance.getEntriesByType('navigation')[0].loadEventEnd"
                               )["result"]["value"]
            shot = cdp.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
            pdf = cdp.call("Page.printToPDF", paperWidth=8.27, paperHeight=11.69, printBackground=True)["data"]
            return Page(dom, counts, _errors(cdp.events), base64.b64decode(shot), base64.b64decode(pdf),
                        float(load_ms))
        finally:
            cdp.close()
    finally:
        _stop(proc, reader)
        shutil.rmtree(profile, ignore_errors=True)
