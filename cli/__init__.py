"""The ``zbroker`` command line (installed as ``zbroker.cli``). Uses only the public API."""
