"""Addresses: loopback or not, IP literal or name, which machine an inventory host is, and where the others
reach it."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Any


def is_loopback(address: str) -> bool:
    if address.strip().lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def is_ip(address: str) -> bool:
    try:
        ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return False
    return True


def url_host(address: str) -> str:
    return f"[{address}]" if ":" in address and not address.startswith("[") else address


def machine_of(name: str, variables: Mapping[str, Any]) -> str:
    """Which machine an inventory host is: the controller for local connections and loopback addresses."""
    if str(variables.get("ansible_connection") or "ssh") == "local":
        return "localhost"
    target = str(variables.get("ansible_host") or name)
    return "localhost" if is_loopback(target) else target.lower()


def address_of(name: str, variables: Mapping[str, Any]) -> str:
    explicit = variables.get("pd_address")
    if explicit:
        return str(explicit)
    if variables.get("ansible_host"):
        return str(variables["ansible_host"])
    return "127.0.0.1" if str(variables.get("ansible_connection") or "") == "local" else name
