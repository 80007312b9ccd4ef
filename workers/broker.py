"""The Redis transport memq's Celery apps use: kombu's own, with one fault of it closed.

When the broker goes away under load, Celery's consumer closes its broken connection twice:
once in ``Connection.collect``, which also lets go of the transport (kombu sets the transport's
``client`` to None), and once more with ``Connection.close``. If the first close of the
default channel stopped on the dead socket before the channel was marked closed, the second
one goes on to requeue the channel's unacknowledged messages, which builds a new Redis
connection pool from the transport's ``client``: ``AttributeError: 'NoneType' object has no
attribute 'hostname'`` in ``Channel._connparams``. That error is not a connection error, so
it escapes Celery's reconnect loop and the worker stops itself, exit status 0 ("Unrecoverable
error"). The same path is taken by an acknowledgement sent on such a channel after the
reconnect.

Here a channel whose transport let go of its connection says so with a connection error,
which kombu and Celery already handle: the close goes on, the consumer reconnects, and the
acknowledgement is logged as not sent ("Couldn't ack"). Such messages stay in Redis'
unacknowledged set and come back after the visibility timeout; memq's leases make that late
redelivery a no-op (its run has moved on).

A channel closed outright has no transport left at all, and a publish through it (a task's
producer that kept the channel across the reconnect) failed with ``AttributeError: 'NoneType'
object has no attribute 'client'``, which failed the task and could end its job ``failed``. It
too gets a connection error, which kombu's publish retry answers with a new channel."""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from redis.exceptions import ConnectionError as RedisConnectionError

# where Celery finds it (``broker_transport``)
TRANSPORT = f"{__name__}:RedisTransport"


class RedisChannel(kombu_redis.Channel):
    """kombu's Redis channel; one whose connection is gone raises a connection error."""

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        # a closed channel has no transport at all (``close_channel`` sets it to None): a
        # producer still holding one after a reconnect publishes through it
        if self.connection is None or self.connection.client is None:
            raise RedisConnectionError("the broker connection of this channel was closed")
        # not in kombu's type stubs, which leave out its private methods
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]
        return params


class RedisTransport(kombu_redis.Transport):
    """kombu's Redis transport with ``RedisChannel``."""

    Channel = RedisChannel
