"""TLS connections to the apiserver that are closed when their handshake cannot start.

CPython's ``ssl`` leaks the socket it is wrapping when the peer resets the TCP connection between
``connect()`` and the TLS handshake: ``SSLSocket._create`` takes over the file descriptor, finds
the socket no longer connected, and re-raises the reset (``ECONNRESET``) without closing itself.
urllib3 then closes only the plain socket it still holds, whose descriptor has moved. The orphaned
``SSLSocket`` lives on in the exception's traceback until the cyclic garbage collector frees it:
a ``ResourceWarning`` at a random later point of the run (docs/reliability.md, "Closed connections").

An apiserver that is killed or restarting resets exactly such connections (accepted by the kernel,
never by the process), so the client's pool makes its HTTPS connections with a context whose
socket class closes itself when its creation fails. :func:`close_failed_handshakes` installs it
on a urllib3 ``PoolManager`` (the Kubernetes client's, in :class:`deploy_suite.access.kube.ClientTransport`).
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

import urllib3
from urllib3.connection import HTTPSConnection
from urllib3.connectionpool import HTTPSConnectionPool
from urllib3.util.ssl_ import create_urllib3_context, resolve_cert_reqs, resolve_ssl_version

# The SSLSocket being created in this thread, so that a failed creation can close it.
_creating = threading.local()


class ClosingSSLSocket(ssl.SSLSocket):
    """An ``SSLSocket`` that is closed, not orphaned, when wrapping its socket fails."""

    def __new__(cls, *args: Any, **kwargs: Any) -> ClosingSSLSocket:
        made = super().__new__(cls, *args, **kwargs)
        _creating.socket = made
        return made

    @classmethod
    def _create(cls, *args: Any, **kwargs: Any) -> ClosingSSLSocket:
        _creating.socket = None
        try:
            made: ClosingSSLSocket = super()._create(*args, **kwargs)  # type: ignore[misc]
        except BaseException:
            orphan = getattr(_creating, "socket", None)
            if orphan is not None:
                orphan.close()
            raise
        finally:
            _creating.socket = None
        return made


class ClosingHTTPSConnection(HTTPSConnection):
    """urllib3's HTTPS connection with its own context (built as urllib3 builds one) whose sockets
    are :class:`ClosingSSLSocket` (a context passed in is used as it is). A connection is used by
    one thread at a time, so the context it reuses when it reconnects is never shared."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.ssl_context is None:
            context = create_urllib3_context(
                ssl_version=resolve_ssl_version(self.ssl_version), ssl_minimum_version=self.ssl_minimum_version,
                ssl_maximum_version=self.ssl_maximum_version, cert_reqs=resolve_cert_reqs(self.cert_reqs))
            if not (self.ca_certs or self.ca_cert_dir or self.ca_cert_data):
                context.load_default_certs()  # what urllib3 does for a context of its own
            context.sslsocket_class = ClosingSSLSocket
            self.ssl_context = context


class ClosingHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = ClosingHTTPSConnection


def close_failed_handshakes(manager: urllib3.PoolManager) -> None:
    """Make ``manager``'s HTTPS pools use :class:`ClosingHTTPSConnection` (a manager with another
    pool class, a SOCKS proxy's, is left as it is)."""
    if manager.pool_classes_by_scheme.get("https") is HTTPSConnectionPool:
        # A copy: the default mapping is urllib3's module-level dict, shared by every manager.
        manager.pool_classes_by_scheme = {**manager.pool_classes_by_scheme, "https": ClosingHTTPSConnectionPool}
