"""The admission webhook: nobody gets through mcad what they could not do themselves.

Rule of this package: it decides about AppWrappers as they are submitted, with the
requester's identity, and never dispatches anything. ``review`` is the decision (pure:
a request in, problems and the access checks to make out); ``server`` serves it over TLS
and asks the hub (SubjectAccessReview) whether the requester may create each wrapped
object; ``certs`` makes the CA and serving certificate; ``certmanager`` keeps them, and
the ValidatingWebhookConfiguration's caBundle, current (on the leader only).
"""
