"""Headless Chromium driven over the DevTools protocol, with every network request refused.

A small client over ``--remote-debugging-pipe`` (NUL-terminated JSON on the
child's file descriptors 3 and 4), for the shared web page's tests and benchmark.
Chromium draws WebGL2 with SwiftShader (software), so no GPU is needed; name
resolution maps every host to nothing, so a page that tried to fetch anything
would fail, and :attr:`Browser.requests` lists every request the page made.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

#: Names of Debian's (and other systems') Chromium.
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "chrome")


def chromium_path() -> str | None:
    """The Chromium executable, or ``None`` when there is none (``FLYVIZ_CHROMIUM`` wins)."""
    given = os.environ.get("FLYVIZ_CHROMIUM")
    if given:
        return given if Path(given).exists() else None
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


class BrowserError(RuntimeError):
    """The browser did not start, answer or do what it was asked."""


class Browser:
    """One headless Chromium with one page, driven over the DevTools pipe.

    Parameters
    ----------
    size
        The window's ``(width, height)`` in CSS pixels (device scale 1).
    """

    def __init__(self, size: tuple[int, int] = (1100, 760), timeout_s: float = 60.0) -> None:
        exe = chromium_path()
        if exe is None:
            raise BrowserError("chromium is not installed (apt-get install chromium)")
        self.timeout_s = timeout_s
        self.profile = tempfile.mkdtemp(prefix="flyviz-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        args = [exe, "--headless=new", "--remote-debugging-pipe", "--no-sandbox",
                "--use-gl=swiftshader", "--enable-unsafe-swiftshader", "--ignore-gpu-blocklist",
                '--host-resolver-rules=MAP * ~NOTFOUND', "--no-first-run",
                "--no-default-browser-check", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--metrics-recording-only", "--mute-audio",
                "--allow-file-access-from-files", f"--user-data-dir={self.profile}",
                f"--window-size={size[0]},{size[1]}", "--hide-scrollbars", "about:blank"]
        self.process = subprocess.Popen(args, preexec_fn=fds, pass_fds=(3, 4, to_child_r, from_child_w),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict[str, Any]] = []
        self.requests: list[str] = []
        try:
            targets = self.call("Target.getTargets")["targetInfos"]
            page = next(t for t in targets if t["type"] == "page")
            self.session = self.call("Target.attachToTarget", targetId=page["targetId"],
                                     flatten=True)["sessionId"]
            self.call("Network.enable", session=True)
            self.call("Page.enable", session=True)
            self.call("Runtime.enable", session=True)
            self.call("Emulation.setDeviceMetricsOverride", session=True, width=size[0],
                      height=size[1], deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------ the protocol
    def _send(self, message: dict[str, Any]) -> None:
        os.write(self._to_child, json.dumps(message).encode() + b"\0")

    def _read(self, deadline: float) -> dict[str, Any]:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("chromium did not answer in time")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if ready:
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise BrowserError("chromium closed the DevTools pipe")
                self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message = json.loads(raw)
        if message.get("method") == "Network.requestWillBeSent":
            self.requests.append(message["params"]["request"]["url"])
        elif "method" in message:
            self.events.append(message)
        return message

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        """Send one command (to the page with ``session``) and return its result."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self._send(message)
        deadline = time.monotonic() + self.timeout_s
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error'].get('message')}")
                return answer.get("result", {})

    # ------------------------------------------------------------ the page
    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited)."""
        result = self.call("Runtime.evaluate", session=True, expression=expression,
                           returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"{expression[:60]}: {text}")
        return result["result"].get("value")

    def open(self, path: Path, fragment: str = "", ready: str = "window.flyviz && "
             "(window.flyviz.ready || window.flyviz.error)", timeout_s: float = 30.0) -> float:
        """Navigate to a local file (with a ``#fragment``) and wait until ``ready`` is true;
        return the seconds from navigation to ready."""
        url = Path(path).resolve().as_uri() + (f"#{fragment}" if fragment else "")
        start = time.monotonic()
        self.call("Page.navigate", session=True, url=url)
        self.wait(ready, timeout_s)
        return time.monotonic() - start

    def wait(self, condition: str, timeout_s: float = 30.0) -> None:
        """Poll until the JavaScript ``condition`` is true."""
        deadline = time.monotonic() + timeout_s
        while not self.evaluate(f"!!({condition})"):
            if time.monotonic() > deadline:
                raise BrowserError(f"the page did not reach {condition!r} in {timeout_s:g} s")
            time.sleep(0.05)

    def png(self, expression: str) -> bytes:
        """The PNG bytes of a ``data:image/png;base64,...`` URL an expression returns."""
        url = self.evaluate(expression)
        return base64.b64decode(url.split(",", 1)[1])

    def screenshot(self) -> bytes:
        """The whole page as PNG bytes."""
        return base64.b64decode(self.call("Page.captureScreenshot", session=True,
                                          format="png")["data"])

    def mouse(self, kind: str, x: float, y: float, **extra: Any) -> None:
        """A mouse event at CSS pixel ``(x, y)`` of the viewport."""
        self.call("Input.dispatchMouseEvent", session=True, type=kind, x=x, y=y, **extra)

    #: Windows virtual key codes of the keys :meth:`key` presses.
    KEY_CODES = {"ArrowLeft": 37, "ArrowRight": 39}

    def key(self, key: str) -> None:
        """Press and release ``key`` (``"ArrowLeft"``, ``"ArrowRight"``) as a keyboard does,
        on whatever has the focus (the browser's own handling of it included)."""
        vk = self.KEY_CODES[key]
        for kind in ("keyDown", "keyUp"):
            self.call("Input.dispatchKeyEvent", session=True, type=kind, key=key, code=key,
                      windowsVirtualKeyCode=vk, nativeVirtualKeyCode=vk)

    def close(self) -> None:
        """Close the browser (and its profile)."""
        try:
            if self.process.poll() is None:
                try:
                    self._send({"id": 0, "method": "Browser.close", "params": {}})
                    self.process.wait(5)
                except (OSError, subprocess.TimeoutExpired):
                    self.process.kill()
                    self.process.wait(5)
        finally:
            for fd in (self._to_child, self._from_child):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
