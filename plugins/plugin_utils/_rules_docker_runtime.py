# -*- coding: utf-8 -*-
# Copyright: contributors to dspark.cluster
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The docker_runtime role's input rules (private; registered in _rules_base.RULES, run through plugin_utils._role_rules).

docker_runtime.platform reads the node's facts, docker_runtime.image_tarball a file on the controller. Pure Python,
no Ansible imports.
"""

from __future__ import annotations

import functools
import json
import os
import re
import tarfile

import yaml

from ansible_collections.dspark.cluster.plugins.plugin_utils._rules_base import COLLECTION_ROOT, HIDDEN, SAFE_LOADER, rule

# The role's own tables (roles/docker_runtime/vars/main.yml: the Debian architecture names, the distributions' engine
# packages), read from there so that the rule and the role's install steps share one definition.
DOCKER_RUNTIME_VARS = os.path.join(COLLECTION_ROOT, "roles", "docker_runtime", "vars", "main.yml")
# A proxy value is written single-quoted into a systemd environment file: a quote or a line break would end the value
# or start a new variable (`%` and `$` are literal there).
_PROXY_RE = re.compile(r"^[^'\x00-\x1f\x7f]*\Z")
# An entry of dockerd's insecure-registries: HOST[:PORT] (a name, or an [IPv6] address) or an IPv4 CIDR, nothing else.
_REGISTRY_HOST = r"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])"
_REGISTRY_PORT = r"(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3})"
_REGISTRY_CIDR = r"([0-9]{1,3}\.){3}[0-9]{1,3}/([0-9]|[12][0-9]|3[0-2])"
REGISTRY_RE = re.compile(r"^(%s(:%s)?|%s)\Z" % (_REGISTRY_HOST, _REGISTRY_PORT, _REGISTRY_CIDR))


@functools.lru_cache(maxsize=1)
def docker_runtime_tables(path=DOCKER_RUNTIME_VARS):
    """(architecture -> Debian architecture, distribution -> its engine and compose packages) of the role's vars."""
    with open(path, encoding="utf-8") as handle:
        data = yaml.load(handle, Loader=SAFE_LOADER) or {}  # nosec B506: a safe loader
    return dict(data.get("_docker_runtime_deb_arch") or {}), dict(data.get("_docker_runtime_distribution_packages") or {})


def _facts(member):
    facts = member.raw("ansible_facts")
    return facts if isinstance(facts, dict) else {}


@rule("docker_runtime.platform", ["docker_runtime_package_source", "ansible_facts"])
def _docker_runtime_platform(member):
    """The node is Debian or Ubuntu (apt), of an architecture the role knows, and the distribution's own packages are
    known when docker_runtime_package_source is distribution. Needs the node's facts: the role's play gathers them;
    preflight gathers none and checks what a fact cache holds."""
    facts = _facts(member)
    if not facts:
        return []
    arches, packages = docker_runtime_tables()
    out = []
    family, arch, distribution = facts.get("os_family"), facts.get("architecture"), facts.get("distribution")
    if family is not None and family != "Debian":
        out.append(("ansible_facts.os_family", family, "is not Debian: the role installs Docker with apt (Debian, Ubuntu, "
                    "DGX OS)", "run docker_runtime on Debian or Ubuntu nodes only, or install the engine another way and "
                    "skip the role (--skip-tags docker_runtime)"))
    if arch is not None and arch not in arches:
        out.append(("ansible_facts.architecture", arch, "has no Debian architecture name known to the role (known: %s)"
                    % ", ".join(sorted(arches)), "run the role on arm64 (DGX Spark) or amd64 nodes"))
    source = member["docker_runtime_package_source"]
    if source == "distribution" and distribution is not None and distribution not in packages:
        out.append(("docker_runtime_package_source", source, "has no known engine packages on %s (ansible_facts.distribution; "
                    "known: %s)" % (distribution, ", ".join(sorted(packages))),
                    "set docker_runtime_package_source: docker (Docker's own apt repository)"))
    return out


@rule("docker_runtime.image", ["dspark_image"], covered_by="inventory: dspark_image")
def _docker_runtime_image(member):
    """dspark_image, the image every node pulls or loads, is set (preflight says it through the inventory rules)."""
    value = member["dspark_image"]
    if isinstance(value, str) and value.strip():
        return []
    return [("dspark_image", value or None, "the serving image every node pulls or loads",
             "set dspark_image to the image, pinned by digest (group_vars)")]


@rule("docker_runtime.proxy", ["docker_runtime_proxy"])
def _docker_runtime_proxy(member):
    """docker_runtime_proxy's values hold no single quote, line break or other control character (they are written
    single-quoted into a systemd environment file); the values are never shown (credentials)."""
    proxy = member["docker_runtime_proxy"]
    if not isinstance(proxy, dict):
        return []  # the type rule says so
    bad = [str(key) for key, value in proxy.items() if value is not None and not _PROXY_RE.match(str(value))]
    if not bad:
        return []
    return [("docker_runtime_proxy", HIDDEN, "has %s with a single quote, a line break or another control character (the "
             "value is not shown: it may hold a password)" % ", ".join(bad), "percent-encode those characters in the URL "
             "(' is %27)")]


@rule("docker_runtime.insecure_registries", ["docker_runtime_insecure_registries"])
def _docker_runtime_insecure_registries(member):
    """Each entry of docker_runtime_insecure_registries is HOST:PORT, a bare HOST or an IPv4 CIDR, with no scheme, path
    or space (dockerd refuses to start on an entry it cannot parse, and a scheme or a path never matches a pull)."""
    value = member["docker_runtime_insecure_registries"]
    if not isinstance(value, (list, tuple)):
        return []  # the type rule says so
    bad = [str(entry) for entry in value if not REGISTRY_RE.match(str(entry))]
    if not bad:
        return []
    return [("docker_runtime_insecure_registries", list(value), "holds %s: each entry must be HOST:PORT (e.g. "
             "10.231.0.250:5000 or registry.lab:5000, port 1-65535), a bare HOST or an IPv4 CIDR, with no scheme (http://), "
             "path or spaces" % ", ".join(repr(entry) for entry in bad),
             "write the registry as it appears in dspark_image before the first '/'")]


@functools.lru_cache(maxsize=16)
def _archive_images(path, size, mtime):  # pylint: disable=unused-argument  # size and mtime key the cache
    """The number of images a `docker save` archive holds (its manifest.json), else the reason it cannot be read."""
    try:
        with tarfile.open(path, "r:*") as archive:
            handle = archive.extractfile("manifest.json")
            manifest = json.load(handle) if handle is not None else None
    except (OSError, tarfile.TarError, KeyError, ValueError) as error:
        return "%s: %s" % (type(error).__name__, str(error).strip() or "unreadable")
    return len(manifest) if isinstance(manifest, list) else "its manifest.json is not a list of images"


@rule("docker_runtime.image_tarball", ["docker_runtime_image_source", "docker_runtime_image_tarball"])
def _docker_runtime_image_tarball(member):
    """With docker_runtime_image_source tarball, docker_runtime_image_tarball is a readable `docker save` archive of one
    image on the controller (its manifest.json is read here, before any node changes)."""
    if member["docker_runtime_image_source"] != "tarball":
        return []
    path = member["docker_runtime_image_tarball"]
    fix = "create it with `docker save -o FILE <dspark_image>` and give its controller path"
    if not isinstance(path, str) or not path.strip():
        return [("docker_runtime_image_tarball", None, "docker_runtime_image_source is tarball", fix)]
    try:
        stat = os.stat(path)
        found = _archive_images(path, stat.st_size, stat.st_mtime)
    except OSError as error:
        found = "%s: %s" % (type(error).__name__, error.strerror or error)
    if found == 1:
        return []
    detail = "holds %d images" % found if isinstance(found, int) else found
    return [("docker_runtime_image_tarball", path, "is not a readable `docker save` archive of one image on the "
             "controller (%s)" % detail, fix)]
