"""The node's capabilities, one module or package each, on the kernel's feature interface
(:mod:`zbroker.node.feature`). Features never import each other; the list a node runs is
composed in :func:`zbroker.broker.node_features`.
"""
