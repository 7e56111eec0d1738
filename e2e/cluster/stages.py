"""KWOK Stages: how the test bed's fake nodes and pods behave.

KWOK >= v0.7 applies default stages only for a resource that has none in the config,
so both lifecycles below are complete on their own.

Nodes: made Ready at once (``node-initialize``), then a status heartbeat every 10 to
30 minutes and no node Leases (KWOK runs with ``--node-lease-duration-seconds=0``;
kube-controller-manager's node lifecycle controller gives a quiet node an hour before
it marks it NotReady, and removes the not-ready taint every new node is created
with). KWOK's defaults renew every node's Lease every 10 s: 300 writes a second for
3 x 1,000 nodes, more than these 2 cores give the whole test bed; the scale runs need
the API servers' time for the work they measure.

Pods: annotations drive them:

- no annotation: Running and Ready ``READY_DELAY`` after being bound, until deleted;
- ``mcad.test/runtime: "<duration>"`` (``1.5s``, ``72s``): Succeeds that long after Running;
- ``mcad.test/never-ready: "true"``: Running but never Ready;
- ``mcad.test/never-start: "true"``: bound, but Pending for ever (an image that never
  pulls);
- ``mcad.test/fail-after: "<duration>"``: Fails that long after Running (it wins over
  a runtime), its containers ending with ``mcad.test/exit-code`` (default 1) and reason
  ``mcad.test/exit-reason`` (default Error); a test fails one running pod of a gang by
  annotating it with ``fail-after: 0s``;
- a deletionTimestamp: finalizers dropped and the pod removed.

Delays carry no jitter: in KWOK a jitter shorter than the delay replaces it.
"""

from __future__ import annotations

READY_DELAY_MS = 300

RUNTIME = "mcad.test/runtime"
NEVER_READY = "mcad.test/never-ready"
NEVER_START = "mcad.test/never-start"
FAIL_AFTER = "mcad.test/fail-after"
EXIT_CODE = "mcad.test/exit-code"
EXIT_REASON = "mcad.test/exit-reason"

_POD_IP = ("{{ PodIPWith .spec.nodeName ( or .spec.hostNetwork false ) ( or .metadata.uid \"\" ) "
           "( or .metadata.name \"\" ) ( or .metadata.namespace \"\" ) | Quote }}")
_CONTAINERS_RUNNING = """
      containerStatuses:
      {{ range .spec.containers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: READY
        restartCount: 0
        started: true
        state:
          running:
            startedAt: {{ $now | Quote }}
      {{ end }}
      initContainerStatuses:
      {{ range .spec.initContainers }}
      - image: {{ .image | Quote }}
        name: {{ .name | Quote }}
        ready: true
        restartCount: 0
        state:
          terminated:
            exitCode: 0
            finishedAt: {{ $now | Quote }}
            reason: Completed
            startedAt: {{ $now | Quote }}
      {{ end }}
      hostIP: {{ NodeIPWith .spec.nodeName | Quote }}
      podIP: POD_IP
      phase: Running
      startTime: {{ $now | Quote }}
"""


_STARTS = (f"    - key: '.metadata.annotations[\"{NEVER_START}\"]'\n"
           "      operator: 'NotIn'\n      values: ['true']")


def _running(name: str, *, ready: bool, selector_extra: str) -> str:
    flag = "true" if ready else "false"
    status = "True" if ready else "False"
    return f"""apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: {name}
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.podIP'
      operator: 'DoesNotExist'
{selector_extra}
  delay:
    durationMilliseconds: {READY_DELAY_MS}
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "True"
        type: Initialized
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "{status}"
        type: Ready
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "{status}"
        type: ContainersReady
{_CONTAINERS_RUNNING.replace("READY", flag).replace("POD_IP", _POD_IP)}"""


def _finish(name: str, *, annotation: str, phase: str, exit_code: str, reason: str,
            unless: str = "") -> str:
    unless_selector = (f"\n    - key: '.metadata.annotations[\"{unless}\"]'\n"
                       "      operator: 'DoesNotExist'") if unless else ""
    return f"""apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: {name}
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'DoesNotExist'
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.metadata.annotations["{annotation}"]'
      operator: 'Exists'{unless_selector}
  delay:
    durationMilliseconds: 0
    durationFrom:
      expressionFrom: '.metadata.annotations["{annotation}"]'
  next:
    statusTemplate: |
      {{{{ $now := Now }}}}
      conditions:
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: Ready
      - lastTransitionTime: {{{{ $now | Quote }}}}
        status: "False"
        type: ContainersReady
      containerStatuses:
      {{{{ range .spec.containers }}}}
      - image: {{{{ .image | Quote }}}}
        name: {{{{ .name | Quote }}}}
        ready: false
        restartCount: 0
        started: false
        state:
          terminated:
            exitCode: {exit_code}
            finishedAt: {{{{ $now | Quote }}}}
            reason: {reason}
            startedAt: {{{{ $now | Quote }}}}
      {{{{ end }}}}
      phase: {phase}
"""


POD_DELETE = """apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  resourceRef:
    apiGroup: v1
    kind: Pod
  selector:
    matchExpressions:
    - key: '.metadata.deletionTimestamp'
      operator: 'Exists'
  next:
    finalizers:
      empty: true
    delete: true
"""


NODE_STATUS = """
      {{ $now := Now }}
      {{ $lastTransitionTime := or .metadata.creationTimestamp $now }}
      conditions:
      {{ range NodeConditions }}
      - lastHeartbeatTime: {{ $now | Quote }}
        lastTransitionTime: {{ $lastTransitionTime | Quote }}
        message: {{ .message | Quote }}
        reason: {{ .reason | Quote }}
        status: {{ .status | Quote }}
        type: {{ .type | Quote }}
      {{ end }}
      addresses:
      {{ with .status.addresses }}
      {{ YAML . 1 }}
      {{ else }}
      {{ with NodeIP }}
      - address: {{ . | Quote }}
        type: InternalIP
      {{ end }}
      {{ with NodeName }}
      - address: {{ . | Quote }}
        type: Hostname
      {{ end }}
      {{ end }}
      allocatable:
      {{ YAML .status.allocatable 1 }}
      capacity:
      {{ YAML .status.capacity 1 }}
      nodeInfo:
        architecture: amd64
        operatingSystem: linux
        kubeletVersion: {{ printf "kwok-%s" Version }}
      phase: Running
"""

NODE_INITIALIZE = """apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-initialize
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'NotIn'
      values: ['True']
  next:
    statusTemplate: |""" + NODE_STATUS

NODE_HEARTBEAT = """apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: node-heartbeat-slow
spec:
  resourceRef:
    apiGroup: v1
    kind: Node
  selector:
    matchExpressions:
    - key: '.status.phase'
      operator: 'In'
      values: ['Running']
    - key: '.status.conditions.[] | select( .type == "Ready" ) | .status'
      operator: 'In'
      values: ['True']
  delay:
    durationMilliseconds: 600000
    jitterDurationMilliseconds: 1200000
  next:
    statusTemplate: |""" + NODE_STATUS


def node_stages() -> str:
    """The node Stages: Ready at once, then a rare status heartbeat (no Leases)."""
    return "---\n".join([NODE_INITIALIZE, NODE_HEARTBEAT])


def all_stages() -> str:
    """Every node and pod Stage, as one multi-document YAML for ``kwok --config``."""
    return "---\n".join([node_stages(), pod_stages()])


def pod_stages() -> str:
    """Every pod Stage, as one multi-document YAML for ``kwok --config``."""
    docs = [
        _running("pod-ready", ready=True, selector_extra=(
            f"    - key: '.metadata.annotations[\"{NEVER_READY}\"]'\n"
            "      operator: 'NotIn'\n      values: ['true']\n" + _STARTS)),
        _running("pod-never-ready", ready=False, selector_extra=(
            f"    - key: '.metadata.annotations[\"{NEVER_READY}\"]'\n"
            "      operator: 'In'\n      values: ['true']\n" + _STARTS)),
        _finish("pod-complete", annotation=RUNTIME, phase="Succeeded", exit_code="0",
                reason="Completed", unless=FAIL_AFTER),
        _finish("pod-fail", annotation=FAIL_AFTER, phase="Failed",
                exit_code=f'{{{{ or (index $.metadata.annotations "{EXIT_CODE}") "1" }}}}',
                reason=f'{{{{ or (index $.metadata.annotations "{EXIT_REASON}") "Error" }}}}'),
        POD_DELETE,
    ]
    return "---\n".join(docs)
