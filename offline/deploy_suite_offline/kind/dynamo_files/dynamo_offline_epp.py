"""The EPP of a gaie DGD in the kind provider's Dynamo image: ``nvcr.io/nvidia/ai-dynamo/dynamo-epp``.

The real image runs the Gateway API Inference Extension's endpoint picker with Dynamo's plugins, a Go
binary that nothing here can pull. This stand-in is what the registry serves under that name
(``registry.EPP_ENTRYPOINT``): it takes the arguments the operator gives the EPP (Go's flag syntax:
``-pool-name P -grpc-port 9002 -grpc-health-port 9003 -config-file F ...``, one or two dashes,
``-flag=value`` too) and serves the gRPC health service the operator's probes ask for
(``grpc.health.v1.Health`` on the health port, service ``inference-extension``), so real kubelets
judge it by real gRPC probes. The endpoint-picking port accepts gRPC connections and implements no
method: the offline suite's gaie DGDs route directly (``--router-mode direct``), so no gateway asks
it for picks (docs/offline-cluster.md, "Engines in the Dynamo image").
"""

from __future__ import annotations

import signal
import sys
import threading
from concurrent import futures

HEALTH_SERVICE = "inference-extension"
DEFAULTS = {"grpc-port": "9002", "grpc-health-port": "9003"}


def _say(text: str) -> None:
    print(f"[deploy-suite epp stand-in] {text}", flush=True)


def parse(argv: list[str]) -> dict[str, str]:
    """Go ``flag`` syntax: ``-name value``, ``--name value``, ``-name=value``; a flag followed by
    another flag (or by nothing) is a boolean. Every flag is kept: the real EPP's list is long and
    grows, and this stand-in must never refuse an argument the real one takes."""
    flags: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if not arg.startswith("-") or arg in ("-", "--"):
            raise SystemExit(f"unexpected argument {arg!r}: the EPP takes flags only")
        name, eq, value = arg.lstrip("-").partition("=")
        if not eq:
            following = argv[i + 1] if i + 1 < len(argv) else None
            if following is not None and not following.startswith("-"):
                value = following
                i += 1
            else:
                value = "true"
        flags[name] = value
        i += 1
    return {**DEFAULTS, **flags}


def _port(flags: dict[str, str], name: str) -> int:
    try:
        return int(flags[name])
    except ValueError:
        raise SystemExit(f'invalid value "{flags[name]}" for flag -{name}: parse error') from None


def main(argv: list[str] | None = None) -> int:
    flags = parse(sys.argv[1:] if argv is None else argv)
    grpc_port, health_port = _port(flags, "grpc-port"), _port(flags, "grpc-health-port")
    import grpc  # in the image (dynamo_image.py); imported here so that argument errors need nothing
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    status = health.HealthServicer()
    status.set(HEALTH_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    status.set("", health_pb2.HealthCheckResponse.SERVING)
    health_server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    health_pb2_grpc.add_HealthServicer_to_server(status, health_server)
    # All addresses of the pod's own network namespace: the kubelet probes the pod's IP, on the
    # kind cluster's own Docker network (docs/offline-cluster.md, "The EPP"), as the real EPP listens.
    health_server.add_insecure_port(f"0.0.0.0:{health_port}")
    picker = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    picker.add_insecure_port(f"0.0.0.0:{grpc_port}")
    health_server.start()
    picker.start()
    pool = f"{flags.get('pool-namespace', '?')}/{flags.get('pool-name', '?')}"
    _say(f"pool {pool}: health {HEALTH_SERVICE!r} SERVING on :{health_port}; picker on :{grpc_port} "
         f"(no picks: direct routing); flags {flags}")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    _say("terminating")
    picker.stop(5)
    health_server.stop(5).wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
