"""Ansible's ``mounts`` (hardware) and ``virtualization_*`` (virtual) setup facts on Linux.

Ported from ansible-core 2.19's module_utils/facts (hardware/linux.py get_mount_facts,
virtual/linux.py get_virtual_facts), in the same order of checks, from files only: what
Ansible asks findmnt for (bind mounts) is read from /proc/self/mountinfo (a mount whose
root inside its filesystem is not ``/``), lsblk's UUIDs from /dev/disk/by-uuid, and the
dmidecode/lscpu fallbacks (old kernels, s390) are left out.
"""

from __future__ import annotations

import os
import re
from typing import Any

_OCTAL = re.compile(r"\\[0-7]{3}")
KVM_PRODUCTS = ("KVM", "KVM Server", "Bochs", "AHV", "CloudStack KVM Hypervisor")
KVM_BIOS_VENDORS = ("Amazon EC2", "DigitalOcean", "Hetzner", "Linode")
KVM_SYS_VENDORS = ("QEMU", "Amazon EC2", "DigitalOcean", "Google", "Scaleway", "Nutanix")
CONTAINERS = {"docker", "lxc", "podman", "openvz", "containerd"}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _content(path: str) -> str | None:
    text = _read(path)
    return text.strip() if text is not None else None


def _unescape(text: str) -> str:
    return _OCTAL.sub(lambda match: chr(int(match.group()[1:], 8)), text)


def _bind_mounts() -> set[str]:
    found = set()
    for line in (_read("/proc/self/mountinfo") or "").splitlines():
        fields = line.split()
        if len(fields) > 4 and fields[3] != "/":
            found.add(_unescape(fields[4]))
    return found


def _uuids() -> dict[str, str]:
    folder = "/dev/disk/by-uuid"
    names = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
    return {os.path.realpath(os.path.join(folder, name)): name for name in names}


def _size(mount: str) -> dict[str, int]:
    try:
        st = os.statvfs(mount)
    except OSError:
        return {}
    return {
        "size_total": st.f_frsize * st.f_blocks,
        "size_available": st.f_frsize * st.f_bavail,
        "block_size": st.f_bsize,
        "block_total": st.f_blocks,
        "block_available": st.f_bavail,
        "block_used": st.f_blocks - st.f_bavail,
        "inode_total": st.f_files,
        "inode_available": st.f_favail,
        "inode_used": st.f_files - st.f_favail,
    }


def mount_facts() -> dict[str, Any]:
    mtab = "/etc/mtab" if os.path.exists("/etc/mtab") else "/proc/mounts"
    binds, uuids = _bind_mounts(), _uuids()
    mounts = []
    for line in (_read(mtab) or "").splitlines():
        fields = [_unescape(field) for field in line.split()]
        if len(fields) < 4:
            continue
        device, mount, fstype, options = fields[:4]
        if (not device.startswith(("/", "\\")) and ":/" not in device) or fstype == "none":
            continue
        info: dict[str, Any] = {
            "mount": mount,
            "device": device,
            "fstype": fstype,
            "options": options,
            "dump": int(fields[4]) if len(fields) > 4 else 0,
            "passno": int(fields[5]) if len(fields) > 5 else 0,
        }
        if mount in binds and not re.match(r".*bind.*", options):
            info["options"] += ",bind"
        info.update(_size(mount))
        info["uuid"] = uuids.get(device, "N/A")
        mounts.append(info)
    return {"mounts": mounts}


class _Found:
    """Ansible's bookkeeping: the first technology found names the type and role."""

    def __init__(self) -> None:
        self.facts: dict[str, Any] = {}
        self.found = False
        self.guest: set[str] = set()
        self.host: set[str] = set()

    def guest_is(self, tech: str, role: str | None = "guest") -> None:
        self.guest.add(tech)
        self._first(tech, role)

    def host_is(self, tech: str) -> None:
        self.host.add(tech)
        self._first(tech, "host")

    def _first(self, tech: str, role: str | None) -> None:
        if not self.found:
            self.facts["virtualization_type"] = tech
            if role is not None:
                self.facts["virtualization_role"] = role
            self.found = True


def _containers(found: _Found) -> None:
    for line in (_read("/proc/1/cgroup") or "").splitlines():
        if re.search(r"/docker(/|-[0-9a-f]+\.scope)", line):
            found.guest_is("docker")
        if re.search("/lxc/", line) or re.search("/machine.slice/machine-lxc", line):
            found.guest_is("lxc")
        if re.search("/system.slice/containerd.service", line):
            found.guest_is("containerd")
    for line in (_read("/proc/1/environ") or "").split("\x00"):
        if re.search("container=lxc", line):
            found.guest_is("lxc")
        if re.search("container=podman", line):
            found.guest_is("podman")
        if re.search("^container=.", line):
            found.guest_is("container")
    if os.path.exists("/proc/vz") and not os.path.exists("/proc/lve"):
        found.facts["virtualization_type"] = "openvz"
        if os.path.exists("/proc/bc"):
            found.host_is("openvz")
        else:
            found.guest_is("openvz")
    systemd = _content("/run/systemd/container")
    if systemd:
        found.guest_is(systemd)
    if os.path.exists("/.dockerenv") or os.path.exists("/.dockerinit"):
        found.guest_is("docker")
    if found.guest & CONTAINERS or systemd:
        found.guest.add("container")


def _hypervisors(found: _Found) -> None:
    if os.path.exists("/proc/xen"):
        if "control_d" in (_read("/proc/xen/capabilities") or ""):
            found.host_is("xen")
        else:
            found._first("xen", "guest")
        found.found = True
    assumed = not found.found
    if assumed:
        found.facts["virtualization_role"] = "guest"
    dmi = {key: _content(f"/sys/devices/virtual/dmi/id/{key}") for key in ("product_name", "sys_vendor", "bios_vendor")}
    family = _content("/sys/devices/virtual/dmi/id/product_family")
    product, vendor, bios = dmi["product_name"], dmi["sys_vendor"], dmi["bios_vendor"]
    checks = [
        (product in KVM_PRODUCTS, "kvm"),
        (vendor == "oVirt", "oVirt"),
        (vendor == "Red Hat" and family == "RHV", "RHV"),
        (vendor == "Red Hat" and family != "RHV" and product == "RHEV Hypervisor", "RHEV"),
        (bool(product) and str(product).startswith("VMware"), "VMware"),
        (product in ("OpenStack Compute", "OpenStack Nova"), "openstack"),
        (bios == "Xen", "xen"),
        (bios == "innotek GmbH", "virtualbox"),
        (bios in KVM_BIOS_VENDORS, "kvm"),
        (vendor in KVM_SYS_VENDORS, "kvm"),
        (vendor == "KubeVirt", "KubeVirt"),
        (vendor == "Microsoft Corporation", "VirtualPC"),
        (vendor == "Parallels Software International Inc.", "parallels"),
        (vendor == "OpenStack Foundation", "openstack"),
    ]
    for matched, tech in checks:
        if matched:
            found.guest_is(tech, role=None)
    if assumed and not found.found:
        del found.facts["virtualization_role"]


def _processes_and_modules(found: _Found) -> None:
    for line in (_read("/proc/self/status") or "").splitlines():
        if re.match(r"^VxID:\s+\d+", line):
            (found.host_is if re.match(r"^VxID:\s+0", line) else found.guest_is)("linux_vserver")
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if re.match("^model name.*QEMU Virtual CPU", line):
            found.guest_is("kvm")
        elif re.match("^vendor_id.*User Mode Linux", line) or re.match("^model name.*UML", line):
            found.guest_is("uml")
    modules = [line.split(" ", 1)[0] for line in (_read("/proc/modules") or "").splitlines()]
    if "kvm" in modules:
        found.host_is("kvm")
    if "vboxdrv" in modules:
        found.host_is("virtualbox")
    if "virtio" in modules:
        found.host.add("kvm")
        found._first("kvm", "guest")
    if os.path.exists("/dev/kvm"):
        found.host_is("kvm")


def virtual_facts() -> dict[str, Any]:
    found = _Found()
    _containers(found)
    _hypervisors(found)
    _processes_and_modules(found)
    if not found.found:
        found.facts.update(virtualization_type="NA", virtualization_role="NA")
    return {
        **found.facts,
        "virtualization_tech_guest": sorted(found.guest),
        "virtualization_tech_host": sorted(found.host),
    }


def main(args: dict[str, Any]) -> dict[str, Any]:
    """``args["collect"]``: which of mounts and virtual to gather."""
    facts: dict[str, Any] = {}
    if "mounts" in args.get("collect", ()):
        facts.update(mount_facts())
    if "virtual" in args.get("collect", ()):
        facts.update(virtual_facts())
    return facts
