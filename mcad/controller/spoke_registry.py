"""Which spoke links run: one per SpokeCluster, rebuilt when its kubeconfig changes.

Why a module: a SpokeCluster and the Secret it points at arrive separately and change
separately; the link must follow both without a restart (a re-registered spoke with a
new kubeconfig gets a new connection, a removed one is stopped and forgotten, a label
change only updates the link). Each link runs as a supervised task named
``spoke <name>``: if it fails it is restarted with backoff, and stopping it cancels its
watches and closes its connection.
"""

from __future__ import annotations

import base64
import hashlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from mcad import metrics
from mcad.config import RunConfig
from mcad.controller.clock import utcnow
from mcad.controller.leftovers import leftovers_of
from mcad.controller.spoke_link import Connector, SpokeLink
from mcad.controller.state import ControllerState
from mcad.controller.supervisor import Supervisor
from mcad.gateway.connection import Connection, WriteFence, connect_spoke
from mcad.gateway.errors import BadKubeconfig

log = logging.getLogger(__name__)


class SpokeRegistry:
    def __init__(self, *, state: ControllerState, config: RunConfig, supervisor: Supervisor,
                 connect_hub: Callable[[str], Awaitable[Connection]], fence: WriteFence | None,
                 on_change: Callable[[str, Iterable[str], bool], None],
                 on_health: Callable[[str], None],
                 kinds_in_use: Callable[[str], set[tuple[str, str]]]) -> None:
        self.state = state
        self.config = config
        self.supervisor = supervisor
        self.connect_hub = connect_hub
        self.fence = fence
        self.on_change = on_change
        self.on_health = on_health
        self.kinds_in_use = kinds_in_use

    def sync(self) -> None:
        """Make the running links match the SpokeClusters and their Secrets."""
        wanted = self.state.spoke_objects
        for name in list(self.state.links):
            if name not in wanted:
                self._stop(name)
                metrics.forget_cluster(name)
                metrics.forget_topology(name)
        for name, spoke in wanted.items():
            source, connector = self._source(spoke)
            spec = spoke.get("spec") or {}
            link = self.state.links.get(name)
            if link is not None and self.state.link_sources.get(name) != source:
                self._stop(name)
                link = None
            if link is None:
                self.state.lost_since.pop(name, None)
                link = SpokeLink(name=name, on_change=self.on_change, on_health=self.on_health,
                                 fence=self.fence, local=bool(spec.get("local")),
                                 kinds_in_use=self.kinds_in_use,
                                 node_health=self.config.node_health.rules())
                self.state.links[name] = link
                self.state.link_sources[name] = source
                metrics.register_cluster(name)
                self.supervisor.spawn(f"spoke {name}",
                                      lambda link=link, connector=connector:  # type: ignore[misc]
                                      link.run(connector))
            link.labels = dict(spec.get("labels") or {})
            link.schedulable = not spec.get("unschedulable")
            declared = (spec.get("topology") or {}).get("levels") or []
            link.topology = tuple(declared) or tuple(self.config.topology_levels)
            link.leftovers = len(leftovers_of(spoke))
        self.on_health("")

    def _stop(self, name: str) -> None:
        self.state.lost_since.setdefault(name, utcnow())
        self.state.links.pop(name)
        self.state.link_sources.pop(name, None)
        self.supervisor.cancel(f"spoke {name}")

    def _source(self, spoke: dict[str, Any]) -> tuple[str, Connector]:
        """A fingerprint of how to reach the spoke, and how to connect to it."""
        spec = spoke.get("spec") or {}
        name = spoke["metadata"]["name"]
        if spec.get("local"):
            return "local", lambda: self.connect_hub(name)
        ref = spec.get("kubeconfigSecret") or {}
        secret = self.state.secrets.get(ref.get("name", ""))
        key = ref.get("key", "kubeconfig")
        data = ((secret or {}).get("data") or {}).get(key)
        if secret is None or data is None:
            missing = (f"Secret {self.config.namespace}/{ref.get('name')} has no key {key!r}"
                       if secret else
                       f"Secret {self.config.namespace}/{ref.get('name')} does not exist")

            async def fail() -> Connection:
                raise BadKubeconfig(missing)
            return f"missing:{missing}", fail
        digest = hashlib.sha256(str(data).encode()).hexdigest()

        async def from_secret() -> Connection:
            try:
                text = base64.b64decode(data).decode()
            except ValueError as err:
                raise BadKubeconfig("the Secret's kubeconfig is not base64") from err
            return await connect_spoke(text, name=name,
                                       allow_exec=self.config.allow_exec_credentials)
        return digest, from_secret
