"""LAN discovery: announce this node by mDNS and link to the nodes of its group that it
finds. The zeroconf adapter (:mod:`zbroker.discovery`, shared with the clients' locator)
runs in zeroconf's threads; :mod:`.feature` takes its findings in the loop and makes
discovered links; :mod:`.peers` answers PEERS."""

from .feature import LanDiscovery

__all__ = ["LanDiscovery"]
