"""Fixtures the webhook tests share: the controller's own TLS server (``served``) and a
replica with the webhooks' own process (``converting``), defined beside the tests that
first needed them."""

from tests.webhook.test_conversion_process import converting
from tests.webhook.test_webhook import served

__all__ = ["converting", "served"]
