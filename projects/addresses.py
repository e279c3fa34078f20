"""Which network addresses the server may connect to on a project's behalf.

A webhook target and a repository URL are both chosen by a manager, and both make this
server open a connection. One policy covers them: a name must resolve only to public
addresses (no loopback, private, link-local, multicast or otherwise reserved ones),
unless the operator allows private ones for that use. The answer is the addresses that
were checked, so the caller connects to exactly those, never to what a second lookup of
the same name answers (DNS rebinding).
"""

import ipaddress
import socket
from dataclasses import dataclass


class AddressRefused(ValueError):
    """The host may not be reached; the message says why, in words a manager can act on."""


@dataclass(frozen=True)
class Checked:
    """A host name and the addresses it resolved to when it was checked."""

    host: str
    port: int
    addresses: tuple[str, ...]


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    address = ipaddress.ip_address(text.split("%", 1)[0])
    # An IPv4 address written as IPv6 (::ffff:127.0.0.1) is judged as what it is.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def is_public(text: str) -> bool:
    """Whether an address is one of the public internet's (global and not multicast)."""
    address = _address(text)
    return address.is_global and not address.is_multicast


def resolve(host: str, port: int, *, allow_private: bool, what: str) -> Checked:
    """The addresses ``host`` resolves to, each one allowed, or ``AddressRefused``.

    ``what`` names the use in the refusal ("webhooks", "repositories"). With
    ``allow_private`` any address is allowed (tests, ``make run``, a site whose code
    host lives on its own network).
    """
    if not host:
        raise AddressRefused("the URL names no host")
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        raise AddressRefused(f"the host {host} does not resolve") from None
    addresses = tuple(dict.fromkeys(info[4][0].split("%", 1)[0] for info in infos))
    if not allow_private:
        for address in addresses:
            if not is_public(address):
                raise AddressRefused(
                    f"{host} resolves to {address}, an address inside the network;"
                    f" {what} are reached at public addresses only"
                )
    return Checked(host=host, port=port, addresses=addresses)
