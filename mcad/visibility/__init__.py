"""The visibility API: the queue, explanations, dry runs and the web view, served through
the hub's API server so that RBAC decides who sees what.

Why through the API server (Kueue's ``visibility.kueue.x-k8s.io`` does the same): the
leader knows every tenant's queue, reasons, quota and nodes, and an HTTP port answers
whoever reaches it. As an aggregated API (``APIService v1alpha1.visibility.codeflare.dev``)
every request is first authenticated by kube-apiserver and authorized by RBAC on a
resource (``pendingappwrappers`` and ``explanations`` per namespace, ``views`` for the
page), then proxied to the leader with the front proxy's client certificate and the
caller in headers; the leader answers only such requests, and filters what it answers
by what the caller may list (``scope``).

- ``api``: the routes, and the front-proxy check in front of them;
- ``answers``: the one place that builds every answer (queue rows, an explanation, the
  page's state) from the last cycle and the last forecast, with one rule for the estimate;
- ``scope``: what one caller may see (SubjectAccessReviews, cached), and the redaction
  of other namespaces' AppWrappers from the sentences they may see;
- ``dryrun``: a dry run that cannot hurt the leader (bounded body, no YAML aliases,
  worked out off the event loop, one at a time);
- ``client``: the other side, for ``mcad queue``, ``mcad explain`` and ``mcad.client``.

Its names (group, version, resources) are in ``mcad.api.visibility``.
"""

