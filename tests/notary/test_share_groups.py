"""Keys of the hierarchical probe shares (notary/limits.py): NAT64 and IPv4-mapped clients
are their embedded IPv4 address; networks are IPv4 /24 and IPv6 /48."""

from __future__ import annotations

import pytest

from notary.limits import client_key, group_key


@pytest.mark.parametrize(("address", "client", "group"), [
    ("192.0.2.7", "192.0.2.7", "192.0.2.0/24"),
    ("64:ff9b::c000:207", "192.0.2.7", "192.0.2.0/24"),  # NAT64 (RFC 6052)
    ("::ffff:192.0.2.7", "192.0.2.7", "192.0.2.0/24"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64", "2001:db8:1::/48"),
])
def test_client_and_group_keys(address: str, client: str, group: str) -> None:
    assert client_key(address) == client
    assert group_key(client_key(address)) == group


def test_twin_other_networks_get_other_keys() -> None:
    # every NAT64 client behind one gateway would share one /64 key without the rule
    assert client_key("64:ff9b::c000:207") != client_key("64:ff9b::c000:208")
    assert group_key(client_key("64:ff9b::c000:207")) != group_key(client_key("64:ff9b::c633:6401"))
    assert group_key(client_key("2001:db8:1::1")) != group_key(client_key("2001:db8:2::1"))
