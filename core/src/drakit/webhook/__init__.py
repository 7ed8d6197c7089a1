"""drakit's admission webhook transport: an HTTPS server speaking ``admission.k8s.io/v1``.

The decisions are made by an engine reached through :class:`AdmissionEngine`
(``drakit.webhook.admission.Admission`` in ``drakit webhook``), as :mod:`drakit.kubelet` reaches the
node's handlers, so this package imports neither the plugin host nor the Kubernetes client.
"""

from drakit.webhook.review import AdmissionRequest, AdmissionResponse, parse_review, to_review
from drakit.webhook.server import AdmissionEngine, WebhookServer

__all__ = [
    "AdmissionEngine",
    "AdmissionRequest",
    "AdmissionResponse",
    "WebhookServer",
    "parse_review",
    "to_review",
]
