"""The gateway: the one package that talks to Kubernetes API servers.

Rule of this package: all API access lives here (an import-linter contract keeps
kubernetes_asyncio out of every other package). It turns kubeconfigs into
connections, sends JSON requests with retries that honour 429/Retry-After, maps
failures onto one error hierarchy (``mcad.gateway.errors``), discovers resources of
any kind, and offers list-then-watch streams that resume, relist on 410 Gone and
reconnect with backoff. Objects travel as plain dicts: the controller reads the few
fields it needs, and wrapped objects of any kind pass through untouched.
"""
