"""Topics with state: current values, their versions, and the network queries that read
and remove them (see :mod:`zbroker.stateful` for the rules)."""

from .feature import StateFeature

__all__ = ["StateFeature"]
