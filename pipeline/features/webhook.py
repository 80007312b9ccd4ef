"""Job webhooks: one signed POST of the job's outcome to the caller's URL, never to an address
inside the deployment.

A tenant chooses the URL, so without a guard any tenant could make a worker POST to the
unauthenticated services next to it (Elasticsearch, Redis, Flower, a cloud metadata endpoint)
and read the outcome back from its job record. The guard:

- resolves the host when the webhook is sent, refuses it when ANY of its addresses is not
  globally routable (loopback, private, link-local and so metadata, shared, reserved,
  multicast, unspecified), unless ``MEMQ_WEBHOOK_ALLOW`` lists it;
- connects to the very address it checked (the URL's host goes in ``Host`` and in TLS's SNI and
  certificate check), so a DNS answer that changes between check and connect (rebinding) is
  never used;
- never follows a redirect (a 3xx is reported as not delivered);
- gives each delivery ``timeout_s`` of wall-clock time in all, and sends a batch's deliveries
  at once, so a receiver that answers slowly (or trickles its answer) delays only itself;
- records only what the tenant may know: refused, no HTTP answer, or the HTTP status. Never
  the exception text, so a job record is no port scanner.

Signing: ``X-Memq-Timestamp`` (Unix seconds) and ``X-Memq-Signature: sha256=hex(HMAC-SHA256(
key, "{timestamp}.{body}"))``, the scheme of the generic inbound hook. The key is the tenant's
own (``tenant_signing_key``), derived from ``MEMQ_WEBHOOK_SIGNING_SECRET``, so one tenant cannot
forge deliveries to another tenant's receiver.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from pipeline.features.chat import GENERIC, sign

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]


def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (``socket.gaierror`` when it does not)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class AllowRule:
    """One ``MEMQ_WEBHOOK_ALLOW`` entry: an address or network (``10.0.0.0/8``, ``::1``),
    optionally with one port (``127.0.0.1:8080``, ``[::1]:8080``)."""

    network: IPNetwork
    port: int | None = None

    def allows(self, address: IPAddress, port: int) -> bool:
        return address in self.network and self.port in (None, port)


def parse_allow(entry: str) -> AllowRule:
    """``AllowRule`` of one entry; ``ValueError`` with the reason when it is not one."""
    text, port = entry.strip(), None
    if text.startswith("["):
        text, _, rest = text[1:].partition("]")
        port = _port(rest.removeprefix(":")) if rest else None
    elif text.count(":") == 1:
        text, raw_port = text.split(":")
        port = _port(raw_port)
    try:
        return AllowRule(ipaddress.ip_network(text, strict=False), port)
    except ValueError as exc:
        raise ValueError(f"{entry!r} is not an address or network, with an optional :port") from exc


def _port(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"{text!r} is not a port")
    return int(text)


def parse_allow_list(raw: str) -> tuple[AllowRule, ...]:
    """Comma-separated entries (see ``AllowRule``); empty means none."""
    return tuple(parse_allow(entry) for entry in raw.split(",") if entry.strip())


# Never a target, whatever ``is_global`` says: IETF protocol assignments (192.0.0.8 and its
# neighbours are global by the registry, yet used inside networks), local-use NAT64, and the
# deprecated IPv4-compatible IPv6 form (``::127.0.0.1``), which some stacks route as IPv4.
_NEVER_PUBLIC = tuple(ipaddress.ip_network(n) for n in ("192.0.0.0/24", "64:ff9b:1::/48", "::/96"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one leads to: IPv4-mapped, NAT64 (well-known prefix), 6to4
    or Teredo (its client); None for a plain IPv6 address."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    return address.teredo[1] if address.teredo is not None else None


def is_public(address: IPAddress) -> bool:
    """A plain globally routable unicast address. An IPv6 address that embeds an IPv4 one
    (mapped, NAT64, 6to4, Teredo) is public only when that IPv4 address is too."""
    if any(address in network for network in _NEVER_PUBLIC):
        return False
    if isinstance(address, ipaddress.IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None and not is_public(inner):
            return False
        if address.ipv4_mapped is not None:
            return True  # its IPv4 part was judged; the ::ffff:0:0/96 range itself is not global
    return address.is_global and not address.is_multicast


def tenant_signing_key(secret: str, tenant: str) -> str:
    """The key a tenant verifies its deliveries with (``GET /v1/webhook-secret`` gives it)."""
    return hmac.new(secret.encode(), f"memq webhook {tenant}".encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class Delivery:
    """One webhook to send: where, what, and for which tenant (whose key signs it)."""

    url: str
    payload: dict[str, Any]
    tenant: str


class RefusedError(Exception):
    """The URL's host is not one memq may call."""


@dataclass(frozen=True)
class WebhookSender:
    """Sends job webhooks under the guard above. ``resolve`` is the seam the tests use to play
    a DNS server that changes its answers."""

    allow: Sequence[AllowRule] = ()
    signing_secret: str | None = None
    timeout_s: float = 5.0
    resolve: Resolver = field(default=resolve_host)

    def post(self, url: str, payload: dict[str, Any], tenant: str) -> str | None:
        """POST ``payload`` as signed JSON; None on a 2xx answer, else the reason it was not
        delivered (safe to show the tenant). At least once: a replayed job may call again."""
        return self.post_all([Delivery(url, payload, tenant)])[0]

    def post_all(self, deliveries: Sequence[Delivery]) -> list[str | None]:
        """Every delivery at once, each within ``timeout_s`` of wall-clock time from its first
        byte to its last (httpx's timeouts are per read, so a receiver trickling bytes could
        hold a delivery for as long as it liked): a slow or hostile receiver delays no other
        delivery, and the whole call ends within ``timeout_s``. The reasons, in order."""
        return asyncio.run(self._post_all(deliveries)) if deliveries else []

    async def _post_all(self, deliveries: Sequence[Delivery]) -> list[str | None]:
        return list(await asyncio.gather(*(self._post(d) for d in deliveries)))

    async def _post(self, delivery: Delivery) -> str | None:
        try:
            target = httpx.URL(delivery.url)
            address = await asyncio.to_thread(self.vetted_address, target)  # resolves the name
        except RefusedError as exc:
            return f"webhook refused: {exc}"
        except httpx.InvalidURL:
            return "webhook refused: not a valid URL"
        body = json.dumps(delivery.payload, separators=(",", ":")).encode()
        try:
            async with asyncio.timeout(self.timeout_s):
                return await self._send(target, address, body, delivery.tenant)
        except TimeoutError:
            return f"webhook not delivered: no whole HTTP answer within {self.timeout_s:g} s"

    def vetted_address(self, target: httpx.URL) -> str:
        """The address to connect to: every address of the host must be allowed."""
        if target.scheme not in ("http", "https") or not target.host:
            raise RefusedError("only http and https URLs with a host")
        port = target.port or (443 if target.scheme == "https" else 80)
        try:
            addresses = [
                ipaddress.ip_address(a.split("%")[0]) for a in self.resolve(target.host, port)
            ]
        except (OSError, UnicodeError, ValueError) as exc:
            raise RefusedError(f"the host {target.host} does not resolve") from exc
        if not addresses:
            raise RefusedError(f"the host {target.host} does not resolve")
        for address in addresses:
            if not (is_public(address) or any(r.allows(address, port) for r in self.allow)):
                raise RefusedError(
                    f"{target.host} is a loopback, private, link-local or reserved address "
                    "(MEMQ_WEBHOOK_ALLOW lists the exceptions)"
                )
        return str(addresses[0])

    def refusal(self, url: str) -> str | None:
        """Why memq may not have ``url`` fetched (the guard above: an image URL passed to the
        LLM, which fetches it from inside the deployment), or None when it may."""
        try:
            self.vetted_address(httpx.URL(url))
        except RefusedError as exc:
            return str(exc)
        except httpx.InvalidURL:
            return "not a valid URL"
        return None

    async def _send(self, target: httpx.URL, address: str, body: bytes, tenant: str) -> str | None:
        headers = {"content-type": "application/json", "host": target.netloc.decode("ascii")}
        headers |= self.signature_headers(body, tenant)
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=False) as client:
                response = await client.request(
                    "POST",
                    target.copy_with(host=address),
                    content=body,
                    headers=headers,
                    extensions={"sni_hostname": target.host},
                )
        except httpx.HTTPError:
            return "webhook not delivered: no HTTP answer"
        if response.is_success:
            return None
        return f"webhook not delivered: HTTP {response.status_code}"

    def signature_headers(self, body: bytes, tenant: str) -> dict[str, str]:
        if self.signing_secret is None:
            return {}
        key = tenant_signing_key(self.signing_secret, tenant)
        timestamp = str(int(time.time()))
        return {
            "x-memq-timestamp": timestamp,
            "x-memq-signature": sign(GENERIC, key, timestamp, body),
        }
