"""A real headless Chromium, driven over the DevTools protocol, for the web view's tests.

Chromium from the machine's packages (``apt-get install chromium``; ``make e2e``
installs it when missing) runs headless with a throw-away profile; the test talks to
its page over the DevTools WebSocket (aiohttp, already a dependency): navigate, run a
script and get its value, click, take a screenshot. No browser is downloaded, no
driver is needed, and the page runs exactly as a person's browser would run it.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp

from e2e.waiting import wait_until


def chromium_path() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    raise AssertionError("no Chromium on PATH: run `apt-get install chromium` (make e2e "
                         "does it when it may)")


class Page:
    """One browser tab: navigate, evaluate, screenshot."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self._ids = itertools.count(1)

    async def send(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self._ids)
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        while True:
            message = await self.ws.receive_json(timeout=30)
            if message.get("id") == ident:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    async def goto(self, url: str) -> None:
        await self.send("Page.navigate", url=url)

    async def eval(self, script: str) -> Any:
        answer = await self.send("Runtime.evaluate", expression=script, returnByValue=True,
                                 awaitPromise=True)
        if "exceptionDetails" in answer:
            raise AssertionError(f"the page's script failed: {answer['exceptionDetails']}")
        return answer.get("result", {}).get("value")

    async def screenshot(self, path: Path) -> None:
        shot = await self.send("Page.captureScreenshot", format="png")
        await asyncio.to_thread(_write, path, base64.b64decode(shot["data"]))


@asynccontextmanager
async def browser(*, width: int = 1366, height: int = 860) -> AsyncIterator[Page]:
    """A headless Chromium with one page the size of a laptop's screen."""
    profile = Path(tempfile.mkdtemp(prefix="mcad-chromium-"))
    proc = await asyncio.create_subprocess_exec(
        chromium_path(), "--headless=new", "--no-sandbox", "--disable-gpu",
        "--no-first-run", "--no-default-browser-check", "--remote-debugging-port=0",
        f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        port_file = profile / "DevToolsActivePort"

        async def port() -> int | None:
            if proc.returncode is not None:
                raise AssertionError(f"chromium exited with {proc.returncode}")
            text = port_file.read_text() if port_file.exists() else ""
            return int(text.split()[0]) if text.strip() else None

        devtools = await wait_until(port, within=30, what="chromium's DevTools port")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{devtools}/json/list") as r:
                targets = json.loads(await r.text())
            page_url = next(t["webSocketDebuggerUrl"] for t in targets if t["type"] == "page")
            async with session.ws_connect(page_url, max_msg_size=64 * 2**20) as ws:
                page = Page(ws)
                await page.send("Emulation.setDeviceMetricsOverride", width=width,
                                height=height, deviceScaleFactor=1, mobile=False)
                yield page
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
