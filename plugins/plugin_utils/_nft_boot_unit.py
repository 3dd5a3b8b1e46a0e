# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The systemd unit that loads a role's nftables table at boot, before the service it guards (private).

Shared by the monitoring role's node_exporter table and the router role's table: ordered before the guarded units
and network-pre.target, and required by the first guarded unit, so that unit never starts without its table.
"""

from __future__ import annotations


def unit(role, table, guards, before, ruleset_path):
    """The unit's text: `guards` names what it protects (in its comment), `before` lists the guarded units, the first
    of which requires the table."""
    return "\n".join([
        "# Written by dspark.cluster's %s role: loads table inet %s before %s." % (role, table, guards),
        "[Unit]",
        "Description=dspark.cluster %s firewall (table inet %s)" % (role, table),
        "Before=network-pre.target %s" % " ".join(before),
        "Wants=network-pre.target",
        "DefaultDependencies=no",
        "After=local-fs.target",
        "",
        "[Service]",
        "Type=oneshot",
        "RemainAfterExit=yes",
        "ExecStart=/usr/sbin/nft -f %s" % ruleset_path,
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "RequiredBy=%s" % before[0],
    ]) + "\n"
