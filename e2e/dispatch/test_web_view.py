"""The live web view in a real headless Chromium, against the test bed, opened as a
person opens it: through ``kubectl proxy`` (here as the hub's administrator; the tenancy
tests open it as a tenant), so the page and its data come through the hub's API server.

Both spokes are filled (8 AppWrappers of 8 GPUs that run until deleted) and two more
wait, ``high`` (priority 9) before ``low`` (priority 1): the page lists them in that
order, and pictures both clusters full. Then a filler is deleted: ``high`` is dispatched
and the page shows it running and only ``low`` waiting, without a reload (a value the
test leaves in the page is still there). The screenshots in docs/img are taken here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from e2e.browser import Page, browser
from e2e.clusters import Cluster, kubectl_proxy
from e2e.controller import REPO, fill_spokes
from e2e.dispatch.conftest import AW, ControllerProcess, create_aw, job_appwrapper
from e2e.waiting import wait_until

SHOTS = REPO / "docs" / "img"


async def rows(page: Page, table: str) -> list[str]:
    keys: list[str] = await page.eval(
        f"[...document.querySelectorAll('#{table} tr.row')].map(r => r.dataset.key)")
    return keys


PAGE = "/apis/visibility.codeflare.dev/v1alpha1/views/page"


async def test_the_page_shows_the_queue_in_order_and_follows_a_dispatch(
        mcad: ControllerProcess, clusters: dict[str, Cluster], aw_namespace: str,
        kubectl_path: Path) -> None:
    hub, ns = clusters["hub"], aw_namespace
    fillers = await fill_spokes(hub, ns)
    for name, priority in (("low", 1), ("high", 9)):
        await create_aw(hub, ns, job_appwrapper(name, pods=1, gpus=8, runtime=None,
                                                priority=priority))
    with kubectl_proxy(kubectl_path, mcad.hub_kubeconfig) as proxy:
        await follow_the_page(proxy + PAGE, hub, ns, fillers)


async def follow_the_page(url: str, hub: Cluster, ns: str, fillers: list[str]) -> None:
    async with browser() as page:
        await page.goto(url)

        async def queued() -> list[str] | None:
            keys = await rows(page, "queue")
            return keys if len(keys) == 2 else None

        order = await wait_until(queued, within=30, what="two AppWrappers on the page")
        assert order == [f"{ns}/high", f"{ns}/low"]
        full: Any = await page.eval(
            "[...document.querySelectorAll('.cluster .title span')].map(s => s.textContent)")
        assert sorted(full) == ["32 of 32 GPUs in use", "32 of 32 GPUs in use"]
        assert await page.eval("document.querySelector('#status').textContent") == "live"
        await page.screenshot(SHOTS / "ui-queue.png")

        await page.eval("window.stillTheSamePage = 42")
        await hub.custom.delete_namespaced_custom_object(*AW[:2], ns, AW[2], fillers[0])

        async def followed() -> bool:
            running, waiting = await rows(page, "running"), await rows(page, "queue")
            return f"{ns}/high" in running and waiting == [f"{ns}/low"]

        await wait_until(followed, within=60, what="high running, on the page")
        assert await page.eval("window.stillTheSamePage") == 42  # no reload

        await page.eval(f"open('{ns}/low')")

        async def detail() -> str | None:
            text: str = await page.eval("document.querySelector('#body').textContent")
            return text if "Checks" in text else None

        text = await wait_until(detail, within=15, what="low's page")
        assert f"{ns}/low: InsufficientCapacity, position 1" in " ".join(text.split())
        await page.screenshot(SHOTS / "ui-appwrapper.png")


def test_the_page_fetches_nothing_from_elsewhere() -> None:
    for file in ("index.html", "app.js", "app.css"):
        page = (REPO / "mcad" / "ui" / file).read_text()
        assert "http://" not in page and "https://" not in page and "//cdn" not in page
