"""The project's test bed: real Kubernetes control planes on 127.0.0.1.

One etcd (shared through distinct ``--etcd-prefix`` values), a hub control plane and
N spoke control planes, each with kube-apiserver, kube-controller-manager,
kube-scheduler (coscheduling plugin on, PodGroup CRD installed) and KWOK managing
fake GPU nodes. ``python -m e2e.cluster up|down|status`` drives it; the pytest
fixtures in ``e2e/conftest.py`` use the same code.

Process ownership: ``up`` starts one *supervisor* process that starts every
component with PR_SET_PDEATHSIG, so a component can never outlive its supervisor;
``down`` stops the supervisor (and, belt and braces, every recorded pid).
"""
