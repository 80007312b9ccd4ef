"""The workers' Redis transport (``workers.broker``): a channel whose transport has let go of
its connection (kombu does so when Celery's consumer closes a broken connection) answers with
a connection error, which kombu and Celery handle, instead of the ``AttributeError`` that
stopped the worker."""

from __future__ import annotations

import pytest
from kombu import Connection
from kombu.common import ignore_errors

from workers.broker import RedisChannel, RedisTransport


def idle_channel(url: str) -> tuple[Connection, RedisChannel]:
    """A channel of ``url`` over our transport, built without talking to Redis (kombu's
    constructor pings the server)."""
    connection = Connection(url, transport=RedisTransport)
    channel = RedisChannel.__new__(RedisChannel)
    channel.connection = connection.transport
    return connection, channel


def test_a_live_channel_connects_where_its_url_says() -> None:
    _, channel = idle_channel("redis://127.0.0.1:6390/3")
    params = channel._connparams()
    assert (params["host"], params["port"], params["db"]) == ("127.0.0.1", 6390, 3)


def test_a_channel_whose_connection_was_let_go_raises_a_connection_error() -> None:
    connection, channel = idle_channel("redis://127.0.0.1:6390/3")
    connection.transport.client = None  # what Connection.collect() leaves behind
    with pytest.raises(connection.connection_errors):
        channel._connparams()
    ignore_errors(connection, channel._connparams)  # as Celery closes: swallowed, it goes on


def test_a_closed_channel_raises_a_connection_error() -> None:
    """``close_channel`` leaves the channel no transport: a publish through it (a producer
    that kept it across a reconnect) must be a connection error, which kombu's publish retry
    handles, not an ``AttributeError`` that fails the task."""
    connection, channel = idle_channel("redis://127.0.0.1:6390/3")
    channel.channel_id = 1
    connection.transport.close_channel(channel)
    assert channel.connection is None
    with pytest.raises(connection.connection_errors):
        channel._connparams()
