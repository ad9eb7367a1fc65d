"""Whether telemetry is on: :func:`instrument` was called, or the application set a global
tracer provider (see :mod:`chat_memory.telemetry`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from .instruments import Instruments

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

_explicit: Instruments | None = None
_global: Instruments | None = None


def instrument(
    tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None
) -> None:
    """Report through these providers (None: the global ones) from now on, whether or not a
    global tracer provider is set. Needs ``opentelemetry-api`` (``pip install
    'chat-memory[otel]'``)."""
    global _explicit
    try:
        _explicit = Instruments(tracer_provider, meter_provider)
    except ImportError as exc:
        raise ConfigurationError(
            "telemetry needs opentelemetry-api: pip install 'chat-memory[otel]'"
        ) from exc


def uninstrument() -> None:
    """Undo :func:`instrument`: back to reporting only when a global tracer provider is set."""
    global _explicit, _global
    _explicit = _global = None


def current() -> Instruments | None:
    """The instruments to report through, or None when telemetry is off. Off costs a look-up:
    opentelemetry is never imported here, only found already imported by the application."""
    if _explicit is not None:
        return _explicit
    if _global is not None:
        return _global
    trace_api = sys.modules.get("opentelemetry.trace")
    if trace_api is None:
        return None
    # The api's own check (get_tracer_provider) reads os.environ, a microsecond at every
    # hook; after it said no once, its global (set when a provider is) says whether that
    # changed. An api without that global gets the full check every time.
    if _provider_checked and getattr(trace_api, "_TRACER_PROVIDER", _MISSING) is None:
        return None
    return _from_global_providers(trace_api)


_MISSING = object()
_provider_checked = False


def _from_global_providers(trace_api: Any) -> Instruments | None:
    global _global, _provider_checked
    # the api's default is a proxy until the application sets a provider (a set one stays);
    # get_tracer_provider also loads one named by OTEL_PYTHON_TRACER_PROVIDER
    if isinstance(trace_api.get_tracer_provider(), trace_api.ProxyTracerProvider):
        _provider_checked = True
        return None
    _global = Instruments(None, None)
    return _global


__all__ = ["current", "instrument", "uninstrument"]
