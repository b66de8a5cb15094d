"""``aisimulate_core.sdk`` in the kind provider's Dynamo image (docs/offline-cluster.md, "Engines in
the Dynamo image").

NVIDIA's ``aisimulate`` is served from NVIDIA's package index only, which is not reachable here.
ai-dynamo imports names from it at module level on paths that never use them (the planner's
performance models, which ``dynamo.mocker --planner-profile-data`` loads), so every name this module
is asked for is a class that fails when used: AIS timing is not offered offline.
"""

from __future__ import annotations

from typing import Any, NoReturn


class _Unavailable:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        _refuse(type(self).__name__)


def _refuse(name: str) -> NoReturn:
    raise RuntimeError(f"aisimulate_core.sdk.{name}: NVIDIA's aisimulate is not installed in this offline image "
                       "(AIS timing is not available; use --planner-profile-data or the default timing)")


def __getattr__(name: str) -> type:
    if name.startswith("__"):
        raise AttributeError(name)
    return type(name, (_Unavailable,), {})
