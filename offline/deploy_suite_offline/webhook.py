"""The operator replica's admission webhooks, served over TLS on 127.0.0.1 by the controllers process.

``cluster up`` makes a CA and a serving certificate for ``IP:127.0.0.1`` with the openssl CLI
(:func:`make_tls`), picks a port, and registers a ``ValidatingWebhookConfiguration`` whose
``clientConfig.url`` points here with the CA as ``caBundle`` (:func:`dgd_webhook_configuration`),
``failurePolicy: Fail`` as the operator's chart sets it. The real kube-apiserver then calls
:class:`WebhookServer` on every DGD create, update and server-side dry-run; when the controllers
process is stopped the call fails and the apiserver refuses DGD writes (a platform fault).

Paths:

* ``/validate-nvidia-com-dynamographdeployment``: the operator's DGD rules
  (:mod:`deploy_suite_offline.operator_sim.admission`);
* ``/convert``: the DGD conversion v1alpha1 <-> v1beta1
  (:mod:`deploy_suite_offline.operator_sim.conversion`), when ``cluster up --conversion-webhook``;
* ``/refuse-pods``: refuses every pod it is asked about, for the pod-admission fault switch
  (:func:`deploy_suite_offline.faults.pod_admission_refusal`), whose configuration selects the pods.

The ConfigMap ``kube-system/deploy-suite-webhook`` (:data:`INFO_CONFIGMAP`) records the base URL
and the CA, so fault switches can register webhooks served here.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from deploy_suite.constants import Obj
from deploy_suite_offline import procs
from deploy_suite_offline.errors import ClusterError
from deploy_suite_offline.faults import REFUSE_PODS_PATH, WEBHOOK_INFO_CONFIGMAP
from deploy_suite_offline.operator_sim import admission, conversion
from deploy_suite_offline.operator_sim.profiles import Profile
from deploy_suite_offline.procs import Log

DGD_PATH = "/validate-nvidia-com-dynamographdeployment"
CONVERT_PATH = "/convert"
CONFIGURATION_NAME = "dynamo-operator-validating-webhook-configuration"
INFO_CONFIGMAP = WEBHOOK_INFO_CONFIGMAP
REFUSAL = "pods refused by the deploy-suite fault switch {name}"
# P-256 keys: generated in milliseconds (RSA-2048 takes most of a second on a loaded machine).
EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1")


def make_tls(directory: Path) -> None:
    """A CA (``ca.crt``) and a serving certificate for IP 127.0.0.1 (``tls.crt``, ``tls.key``)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    steps = [
        ["req", "-x509", *EC_KEY, "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650",
         "-subj", "/CN=deploy-suite-webhook-ca"],
        ["req", *EC_KEY, "-nodes", "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=127.0.0.1"],
        ["x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-out", "tls.crt",
         "-days", "3650", "-extfile", "san.cnf"],
    ]
    for step in steps:
        done = subprocess.run(["openssl", *step], cwd=directory, capture_output=True, text=True, check=False,
                              timeout=60)
        if done.returncode != 0:
            raise ClusterError(f"openssl {step[0]} failed making the webhook certificates: "
                               f"{done.stderr.strip()[-300:]}; fix: install the openssl CLI")
    (directory / "tls.key").chmod(0o600)
    (directory / "ca.key").chmod(0o600)


def ca_bundle(directory: Path) -> str:
    return base64.b64encode((directory / "ca.crt").read_bytes()).decode()


def base_url(port: int) -> str:
    return f"https://127.0.0.1:{port}"


def dgd_webhook_configuration(profile: Profile, port: int, directory: Path) -> Obj:
    """The operator's ``ValidatingWebhookConfiguration`` for DGDs (create and update, every served version)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME, "labels": {"app.kubernetes.io/managed-by": "deploy-suite"}},
        "webhooks": [{
            "name": admission.WEBHOOK_NAME,
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "matchPolicy": "Equivalent",
            "timeoutSeconds": 10,
            "clientConfig": {"url": base_url(port) + DGD_PATH, "caBundle": ca_bundle(directory)},
            "rules": [{"apiGroups": ["nvidia.com"], "apiVersions": list(profile.served),
                       "operations": ["CREATE", "UPDATE"], "resources": ["dynamographdeployments"],
                       "scope": "Namespaced"}],
        }],
    }


def conversion_stanza(port: int, directory: Path) -> Obj:
    """The CRD's ``spec.conversion`` pointing the apiserver at the DGD conversion webhook."""
    return {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
        "url": base_url(port) + CONVERT_PATH, "caBundle": ca_bundle(directory)}}}


def info_configmap(port: int, directory: Path) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": INFO_CONFIGMAP[1], "namespace": INFO_CONFIGMAP[0]},
            "data": {"url": base_url(port), "caBundle": ca_bundle(directory)}}


def _response(uid: str, verdict: admission.Verdict) -> Obj:
    response: Obj = {"uid": uid, "allowed": verdict.allowed}
    if not verdict.allowed:
        response["status"] = {"code": verdict.code, "reason": verdict.reason, "message": verdict.message}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


class _Handler(BaseHTTPRequestHandler):
    server: WebhookServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        try:
            review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            request: Obj = review.get("request") or {}
        except ValueError:
            self.send_error(400, "not an AdmissionReview")
            return
        path = self.path.split("?", 1)[0]
        if path == CONVERT_PATH:
            self._send({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                        "response": conversion.review(request)})
            return
        if path == DGD_PATH:
            verdict = admission.review(request, update_rules=self.server.profile.update_rules,
                                       field_errors=self.server.profile.field_errors)
        elif path.startswith(REFUSE_PODS_PATH):
            fault = path[len(REFUSE_PODS_PATH):].strip("/") or "pods"
            verdict = admission.Verdict(False, 403, "Forbidden", REFUSAL.format(name=fault))
        else:
            self.send_error(404)
            return
        if not verdict.allowed:
            self.server.log(f"webhook: denied {request.get('operation')} {request.get('kind', {}).get('kind')} "
                            f"{request.get('namespace')}/{request.get('name')}: {verdict.message}")
        self._send(_response(str(request.get("uid", "")), verdict))

    def _send(self, doc: Obj) -> None:
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class WebhookServer(ThreadingHTTPServer):
    """HTTPS on 127.0.0.1 only, with the certificate ``cluster up`` made."""

    daemon_threads = True

    def __init__(self, port: int, directory: Path, profile: Profile, log: Log) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.profile = profile
        self.log = log
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(str(directory / "tls.crt"), str(directory / "tls.key"))
        self.socket = ctx.wrap_socket(self.socket, server_side=True)

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True,
                                  name="webhook")
        thread.start()
        threading.Thread(target=self._stop_on, args=(stop,), daemon=True, name="webhook-stop").start()
        return thread

    def _stop_on(self, stop: threading.Event) -> None:
        stop.wait()
        self.shutdown()


def wait_answering(port: int, ca: Path, alive: Callable[[], bool], timeout: float, log: Path) -> None:
    """Until the webhook on ``port`` completes a TLS handshake trusted by ``ca``. Bounded by the
    caller's whole wait (a cold start of the controllers process under load takes tens of seconds)
    and ended at once when ``alive`` says the process serving it exited."""
    ctx = ssl.create_default_context(cafile=str(ca))
    last: list[OSError] = []

    def answers() -> bool | None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as raw, \
                    ctx.wrap_socket(raw, server_hostname="127.0.0.1"):
                return True
        except OSError as exc:
            last[:] = [exc]
        if not alive():
            raise ClusterError(f"the process serving the admission webhook exited before it answered; fix: see {log}")
        return None

    if procs.poll(answers, timeout, interval=0.1, cap=1.0) is None:
        raise ClusterError(f"the admission webhook on 127.0.0.1:{port} never answered in {timeout:.0f}s "
                           f"({last[0] if last else 'no answer'}); fix: see {log}")
