"""Everything a kind cluster and its Dynamo pods need, built now or found in the cache, in one call.

``python -m deploy_suite_offline.kind.prepare`` is what ``make kind-images`` runs, and what the
kind tests start in the background while the rest of the suite runs (``deploy_suite_offline.fixtures.kind``). The
Go builds (kind, crictl, the node binaries, CoreDNS) keep the CPU busy while the Debian root, the Dynamo
image and the support Jobs' Python image mostly wait on Debian's mirror and PyPI, so they run side
by side (the two images once the Debian root is imported, so it is imported once); the node image
needs the Go builds and the root. Every ensure function takes its own file lock, so a second caller
waits and then reuses.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from deploy_suite import clock
from deploy_suite_offline.errors import ClusterError
from deploy_suite_offline.kind import dynamo_image, nodeimage, python_image, tools
from deploy_suite_offline.procs import Log


@dataclass(frozen=True)
class Prepared:
    node_image: str
    dynamo_image: str
    python_image: str
    seconds: float


def prepare(log: Log = print) -> Prepared:
    started = clock.monotonic()
    lock = threading.Lock()

    def tagged(tag: str) -> Log:
        def say(line: str) -> None:
            with lock:  # two builders print at once: keep their lines whole and named
                log(f"[{tag} {clock.monotonic() - started:4.0f}s] {line}")
        return say

    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="kind-prepare") as pool:
        base = pool.submit(nodeimage.base_image, tagged("dynamo"))

        def on_base(ensure: Callable[[Log], dynamo_image.DynamoImage], tag: str) -> dynamo_image.DynamoImage:
            base.result()
            return ensure(tagged(tag))

        dynamo = pool.submit(on_base, lambda say: dynamo_image.ensure_dynamo_image(log=say), "dynamo")
        python = pool.submit(on_base, python_image.ensure_python_image, "python")
        kit = tools.ensure_tools(tagged("tools"))
        node = nodeimage.ensure_node_image(kit, tagged("node"))
        image, support = dynamo.result(), python.result()
    seconds = clock.monotonic() - started
    log(f"kind images ready in {seconds:.0f}s: node {node.ref}, dynamo {image.ref}, python {support.ref}")
    return Prepared(node.ref, image.ref, support.ref, seconds)


def main() -> int:
    try:
        prepare(lambda line: print(line, flush=True))
    except ClusterError as exc:
        print(f"kind images: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
