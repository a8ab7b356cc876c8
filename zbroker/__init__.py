"""zbroker: a peer-to-peer message broker on ZeroMQ.

Public API::

    from zbroker import Broker, Client

    with Broker(port=7100) as broker, Client(broker.endpoint) as client:
        client.subscribe("PRICE.>", print)
        client.publish("PRICE.STOCK.IBM", b"101.5")
"""

# first: compiled modules or their sources (ZBROKER_PURE_PYTHON), before any is imported
from . import _compiled  # noqa: F401
from .aio import AsyncClient
from .broker import Broker
from .client import Client, Gap, Message, MessageId, Subscription
from .config import NodeConfig, load_config
from .errors import (
    AddressInUse,
    BrokerUnreachable,
    ClientClosed,
    ConfigError,
    DataDirError,
    InvalidTopic,
    NoSuchDurable,
    PayloadError,
    PermissionDenied,
    ProtocolError,
    PublishTimeout,
    RequestError,
    ReservedTopic,
    SelectorError,
    SubscriptionCancelled,
    ZBrokerError,
)
from .process import tune_gc, tune_malloc

__version__ = "0.1.0"

__all__ = [
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
