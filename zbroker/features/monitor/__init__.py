"""The monitor: Prometheus metrics, health, a JSON API and a live network map over HTTP
(``[monitor]``, ``zbroker start --monitor``). :mod:`.feature` publishes snapshots from
the loop; :mod:`.server` serves them from its own threads (:mod:`.metrics`,
:mod:`.graph`, the page ``map.html``); :mod:`.snapshot` is what they share."""

from .feature import Monitor, MonitorHub

__all__ = ["Monitor", "MonitorHub"]
