"""Reachability checks for the services memq depends on."""

from __future__ import annotations

from typing import Any

from elasticsearch import Elasticsearch

from pipeline.store.client import es_errors


def elasticsearch_health(client: Elasticsearch) -> dict[str, Any]:
    """Cluster name, status and node count. Raises ``TransientError`` when unreachable."""
    with es_errors("cluster health"):
        body = client.cluster.health().body
    return {
        "cluster": body["cluster_name"],
        "status": body["status"],
        "nodes": body["number_of_nodes"],
    }
