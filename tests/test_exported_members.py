"""The public API of the ``zbroker`` package: pinned, so a change to it is deliberate."""

from __future__ import annotations

import importlib
import inspect

import pytest

import zbroker

EXPECTED_ALL = [
    "AddressInUse",
    "AsyncClient",
    "Broker",
    "BrokerUnreachable",
    "Client",
    "ClientClosed",
    "ConfigError",
    "DataDirError",
    "Gap",
    "InvalidTopic",
    "Message",
    "MessageId",
    "NoSuchDurable",
    "NodeConfig",
    "PayloadError",
    "PermissionDenied",
    "ProtocolError",
    "PublishTimeout",
    "RequestError",
    "ReservedTopic",
    "SelectorError",
    "Subscription",
    "SubscriptionCancelled",
    "ZBrokerError",
    "__version__",
    "load_config",
    "tune_gc",
    "tune_malloc",
]


def test_all_is_pinned() -> None:
    assert list(zbroker.__all__) == EXPECTED_ALL


def test_all_has_no_duplicates_and_is_sorted() -> None:
    assert len(set(zbroker.__all__)) == len(zbroker.__all__)
    assert sorted(zbroker.__all__) == list(zbroker.__all__)


@pytest.mark.parametrize("name", EXPECTED_ALL)
def test_every_name_is_importable(name: str) -> None:
    module = importlib.import_module("zbroker")
    assert hasattr(module, name)
    assert getattr(module, name) is not None
    namespace: dict[str, object] = {}
    exec(f"from zbroker import {name}", namespace)
    assert namespace[name] is getattr(zbroker, name)


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from zbroker import *", namespace)
    assert sorted(k for k in namespace if k != "__builtins__") == sorted(EXPECTED_ALL)


def test_version() -> None:
    assert zbroker.__version__ == "0.1.0"


@pytest.mark.parametrize(
    "name",
    [
        "AddressInUse",
        "BrokerUnreachable",
        "ClientClosed",
        "ConfigError",
        "DataDirError",
        "InvalidTopic",
        "PayloadError",
        "ProtocolError",
        "PublishTimeout",
        "RequestError",
        "ReservedTopic",
    ],
)
def test_exported_errors_derive_from_the_base(name: str) -> None:
    cls = getattr(zbroker, name)
    assert isinstance(cls, type)
    assert issubclass(cls, zbroker.ZBrokerError)
    assert issubclass(zbroker.ZBrokerError, Exception)


def test_exported_names_come_from_zbroker() -> None:
    for name in EXPECTED_ALL:
        obj = getattr(zbroker, name)
        if isinstance(obj, type) or callable(obj):
            assert obj.__module__.startswith("zbroker"), (name, obj.__module__)


def test_no_stray_public_attributes() -> None:
    """What `dir(zbroker)` shows beyond `__all__` is subpackages, not leftovers such as a
    `__future__` feature (`zbroker.annotations` once was one)."""
    stray = {
        name
        for name, obj in vars(zbroker).items()
        if not name.startswith("_") and name not in EXPECTED_ALL and not inspect.ismodule(obj)
    }
    assert stray == set()
