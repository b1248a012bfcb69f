"""Ansible's setup facts (the commonly used subset), with Ansible's names, types and values.

Keys are without the ``ansible_`` prefix, as in ``ansible_facts``. Collected from files
under /proc, /sys and /etc and from the interpreter, never by starting a program, so one
gathering costs a few milliseconds. ``args["gather_subset"]`` is read as Ansible reads it
(``subsets``); this probe's groups are ``min``, ``hardware``, ``network`` and ``virtual``
(mounts and virtualization come from the setup_virtual probe).
"""

from __future__ import annotations

import datetime
import fcntl
import getpass
import ipaddress
import os
import platform
import pwd
import socket
import struct
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # at run time the probe bootstrap injects call()
    from engine.probes._call import call

USES = ("setup_virtual",)

OS_FAMILY = {
    **dict.fromkeys(
        [
            "RedHat",
            "Fedora",
            "CentOS",
            "Scientific",
            "CloudLinux",
            "OracleLinux",
            "Amazon",
            "Virtuozzo",
            "XenServer",
            "Alibaba",
            "EulerOS",
            "openEuler",
            "AlmaLinux",
            "Rocky",
            "TencentOS",
            "EuroLinux",
            "MIRACLE",
        ],
        "RedHat",
    ),
    **dict.fromkeys(["Debian", "Ubuntu", "Raspbian", "Linux Mint", "Kali", "Devuan", "Pop!_OS", "Neon"], "Debian"),
    **dict.fromkeys(
        ["SLES", "SLES_SAP", "openSUSE Leap", "openSUSE Tumbleweed", "openSUSE MicroOS", "SL-Micro"], "Suse"
    ),
    **dict.fromkeys(["Archlinux", "Manjaro"], "Archlinux"),
    **dict.fromkeys(["Gentoo", "Funtoo"], "Gentoo"),
    "Alpine": "Alpine",
    "Slackware": "Slackware",
    "Altlinux": "Altlinux",
    "ClearLinux": "ClearLinux",
}
# os-release IDs whose Ansible name is not ID.capitalize()
DISTRIBUTION_NAMES = {
    "rhel": "RedHat",
    "centos": "CentOS",
    "amzn": "Amazon",
    "ol": "OracleLinux",
    "almalinux": "AlmaLinux",
    "opensuse-leap": "openSUSE Leap",
    "opensuse-tumbleweed": "openSUSE Tumbleweed",
    "opensuse-microos": "openSUSE MicroOS",
    "sles": "SLES",
    "sles_sap": "SLES_SAP",
    "arch": "Archlinux",
    "linuxmint": "Linux Mint",
    "pop": "Pop!_OS",
    "clear-linux-os": "ClearLinux",
    "openeuler": "openEuler",
}
# Ansible's table, in its order (the last one present wins)
PKG_MGRS = (
    ("/usr/bin/rpm-ostree", "atomic_container"),
    ("/usr/bin/yum", "dnf"),
    ("/usr/bin/dnf-3", "dnf"),
    ("/usr/bin/dnf5", "dnf5"),
    ("/usr/bin/apt-get", "apt"),
    ("/usr/bin/zypper", "zypper"),
    ("/usr/sbin/urpmi", "urpmi"),
    ("/usr/bin/pacman", "pacman"),
    ("/bin/opkg", "opkg"),
    ("/sbin/apk", "apk"),
    ("/usr/bin/emerge", "portage"),
    ("/usr/bin/xbps-install", "xbps"),
    ("/usr/bin/swupd", "swupd"),
)
DMI = {
    "bios_date": "bios_date",
    "bios_vendor": "bios_vendor",
    "bios_version": "bios_version",
    "board_asset_tag": "board_asset_tag",
    "board_name": "board_name",
    "board_serial": "board_serial",
    "board_vendor": "board_vendor",
    "board_version": "board_version",
    "chassis_asset_tag": "chassis_asset_tag",
    "chassis_serial": "chassis_serial",
    "chassis_vendor": "chassis_vendor",
    "chassis_version": "chassis_version",
    "product_name": "product_name",
    "product_serial": "product_serial",
    "product_uuid": "product_uuid",
    "product_version": "product_version",
    "system_vendor": "sys_vendor",
}
_IF_TYPES = {"1": "ether", "772": "loopback", "32": "infiniband", "776": "tunnel6", "768": "tunnel"}
_IPV6_SCOPES = {"00": "global", "20": "link", "10": "host", "40": "site"}
_SIOCGIFADDR, _SIOCGIFBRDADDR, _SIOCGIFNETMASK = 0x8915, 0x8919, 0x891B


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _key_values(text: str | None, sep: str = "=") -> dict[str, str]:
    found = {}
    for line in (text or "").splitlines():
        key, has_sep, value = line.partition(sep)
        if has_sep:
            found[key.strip()] = value.strip().strip('"')
    return found


# ---- min ------------------------------------------------------------------------------
def platform_facts() -> dict[str, Any]:
    machine, node = platform.machine(), platform.node()
    fqdn = socket.getfqdn()
    bits = str(struct.calcsize("P") * 8)
    facts: dict[str, Any] = {
        "system": platform.system(),
        "kernel": platform.release(),
        "kernel_version": platform.version(),
        "machine": machine,
        "python_version": platform.python_version(),
        "fqdn": fqdn,
        "hostname": node.split(".")[0],
        "nodename": node,
        "domain": ".".join(fqdn.split(".")[1:]),
        "userspace_bits": bits,
        "architecture": machine,
    }
    if machine == "x86_64":
        facts["userspace_architecture"] = "x86_64" if bits == "64" else "i386"
    machine_id = _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id")
    if machine_id:
        facts["machine_id"] = machine_id.strip()
    return facts


def _distribution_name(release: dict[str, str]) -> str:
    ident = release.get("ID", "")
    return DISTRIBUTION_NAMES.get(ident) or ident.capitalize() or "OtherLinux"


def _distribution_version(release: dict[str, str]) -> str:
    version = release.get("VERSION_ID", "")
    if release.get("ID") == "debian":
        best = (_read("/etc/debian_version") or "").strip()
        if best[:1].isdigit():
            return best
    return version


def distribution_facts() -> dict[str, Any]:
    if platform.system() != "Linux":
        name = platform.system()
        return {"distribution": name, "distribution_version": platform.version(), "os_family": name}
    release = _key_values(_read("/etc/os-release") or _read("/usr/lib/os-release"))
    name = _distribution_name(release)
    version = _distribution_version(release)
    major, _, rest = version.partition(".")
    facts = {
        "distribution": name,
        "distribution_version": version,
        "distribution_major_version": major or "NA",
        "distribution_release": release.get("VERSION_CODENAME") or release.get("UBUNTU_CODENAME") or "NA",
        "os_family": OS_FAMILY.get(name, name),
    }
    if rest:
        facts["distribution_minor_version"] = rest.split(".")[0]
    return {**facts, **_distribution_file(facts["os_family"])}


def _distribution_file(os_family: str) -> dict[str, Any]:
    """Which file Ansible read the distribution from (the two families it is known for)."""
    if os_family == "RedHat" and os.path.exists("/etc/redhat-release"):
        path, variety = "/etc/redhat-release", "RedHat"
    elif os_family == "Debian":
        path, variety = "/etc/os-release", "Debian"
    else:
        return {}
    return {"distribution_file_path": path, "distribution_file_variety": variety, "distribution_file_parsed": True}


def python_facts() -> dict[str, Any]:
    info = sys.version_info
    return {
        "python": {
            "version": {
                "major": info.major,
                "minor": info.minor,
                "micro": info.micro,
                "releaselevel": info.releaselevel,
                "serial": info.serial,
            },
            "version_info": list(info),
            "executable": sys.executable,
            "has_sslcontext": True,
            "type": sys.implementation.name,
        }
    }


def _rh_pkg_mgr() -> str:
    if os.path.exists("/run/ostree-booted"):
        return "atomic_container"
    for path in ("/usr/bin/dnf", "/usr/bin/microdnf"):
        if os.path.exists(path):
            return "dnf5" if os.path.realpath(path) == "/usr/bin/dnf5" else "dnf"
    return "unknown"


def pkg_mgr_facts(os_family: str) -> dict[str, Any]:
    found = "unknown"
    for path, name in PKG_MGRS:
        if os.path.exists(path):
            found = name
    if os_family == "RedHat":
        found = _rh_pkg_mgr()
    elif os_family == "Debian":
        found = "apt"
    elif os_family == "Altlinux" and found == "apt":
        found = "apt_rpm"
    return {"pkg_mgr": found}


def user_facts() -> dict[str, Any]:
    name = getpass.getuser()
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        entry = pwd.getpwuid(os.getuid())
    return {
        "user_id": name,
        "user_uid": entry.pw_uid,
        "user_gid": entry.pw_gid,
        "user_gecos": entry.pw_gecos,
        "user_dir": entry.pw_dir,
        "user_shell": entry.pw_shell,
        "real_user_id": os.getuid(),
        "effective_user_id": os.geteuid(),
        "real_group_id": os.getgid(),
        "effective_group_id": os.getgid(),  # sic: Ansible reports getgid() here too
    }


def date_time_facts() -> dict[str, Any]:
    stamp = time.time()
    now = datetime.datetime.fromtimestamp(stamp)
    utc = datetime.datetime.fromtimestamp(stamp, tz=datetime.UTC)
    formats = {
        "year": "%Y",
        "month": "%m",
        "weekday": "%A",
        "weekday_number": "%w",
        "weeknumber": "%W",
        "day": "%d",
        "hour": "%H",
        "minute": "%M",
        "second": "%S",
        "date": "%Y-%m-%d",
        "time": "%H:%M:%S",
        "iso8601_basic": "%Y%m%dT%H%M%S%f",
        "iso8601_basic_short": "%Y%m%dT%H%M%S",
    }
    facts = {key: now.strftime(spec) for key, spec in formats.items()}
    facts["epoch"] = facts["epoch_int"] = str(int(stamp))
    facts["iso8601_micro"] = utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    facts["iso8601"] = utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    facts["tz"] = time.strftime("%Z")
    facts["tz_dst"] = time.tzname[1]
    facts["tz_offset"] = time.strftime("%z")
    return {"date_time": facts}


def dns_facts() -> dict[str, Any]:
    dns: dict[str, Any] = {}
    for line in (_read("/etc/resolv.conf") or "").splitlines():
        words = line.split()
        if not words or words[0].startswith(("#", ";")):
            continue
        if words[0] == "nameserver" and len(words) > 1:
            dns.setdefault("nameservers", []).append(words[1])
        elif words[0] == "domain" and len(words) > 1:
            dns["domain"] = words[1]
        elif words[0] in ("search", "sortlist"):
            dns[words[0]] = words[1:]
        elif words[0] == "options":
            for option in words[1:]:
                key, _, value = option.partition(":")
                dns.setdefault("options", {})[key] = value or True
    return {"dns": dns}


def _cmdline() -> dict[str, Any]:
    found: dict[str, Any] = {}
    for word in (_read("/proc/cmdline") or "").split():
        key, has_value, value = word.partition("=")
        found[key] = value if has_value else True
    return found


def _service_mgr() -> str:
    if os.path.isdir("/run/systemd/system"):
        return "systemd"
    init = (_read("/proc/1/comm") or "").strip()
    return os.path.basename(init) or "service"


def _local_facts() -> dict[str, Any]:
    return {}  # /etc/ansible/facts.d (custom facts) is not read


def _ssh_host_keys() -> dict[str, str]:
    facts = {}
    for kind in ("dsa", "rsa", "ecdsa", "ed25519"):
        words = (_read(f"/etc/ssh/ssh_host_{kind}_key.pub") or "").split()
        if len(words) >= 2:
            facts[f"ssh_host_key_{kind}_public"] = words[1]
            facts[f"ssh_host_key_{kind}_public_keytype"] = words[0]
    return facts


def _is_chroot() -> bool:
    if os.environ.get("debian_chroot"):  # noqa: SIM112 (the name Debian sets)
        return True
    root = os.stat("/")
    try:
        init_root = os.stat("/proc/1/root/.")
    except OSError:  # not root, or no /proc: Ansible then expects the root inode of ext*
        return root.st_ino != 2
    return root.st_ino != init_root.st_ino or root.st_dev != init_root.st_dev


def misc_facts() -> dict[str, Any]:
    fips = (_read("/proc/sys/crypto/fips_enabled") or "0").strip() == "1"
    apparmor = "enabled" if os.path.exists("/sys/kernel/security/apparmor") else "disabled"
    cmdline = _cmdline()
    return {
        "env": dict(os.environ),
        "fips": fips,
        "apparmor": {"status": apparmor},
        "cmdline": cmdline,
        "proc_cmdline": dict(cmdline),
        "service_mgr": _service_mgr(),
        "local": _local_facts(),
        "is_chroot": _is_chroot(),
        **_ssh_host_keys(),
    }


def min_facts() -> dict[str, Any]:
    facts = {**platform_facts(), **distribution_facts(), **python_facts(), **user_facts()}
    facts.update(pkg_mgr_facts(facts["os_family"]))
    facts.update(date_time_facts())
    facts.update(dns_facts())
    facts.update(misc_facts())
    return facts


# ---- hardware -------------------------------------------------------------------------
def _meminfo_mb() -> dict[str, int]:
    return {key: int(value.split()[0]) // 1024 for key, value in _key_values(_read("/proc/meminfo"), ":").items()}


def memory_facts() -> dict[str, Any]:
    mem = _meminfo_mb()
    total, free = mem.get("MemTotal", 0), mem.get("MemFree", 0)
    nocache_free = free + mem.get("Buffers", 0) + mem.get("Cached", 0)
    swap_total, swap_free = mem.get("SwapTotal", 0), mem.get("SwapFree", 0)
    return {
        "memtotal_mb": total,
        "memfree_mb": free,
        "swaptotal_mb": swap_total,
        "swapfree_mb": swap_free,
        "memory_mb": {
            "real": {"total": total, "used": total - free, "free": free},
            "nocache": {"free": nocache_free, "used": total - nocache_free},
            "swap": {
                "total": swap_total,
                "free": swap_free,
                "used": swap_total - swap_free,
                "cached": mem.get("SwapCached", 0),
            },
        },
    }


def cpu_facts() -> dict[str, Any]:
    processor: list[str] = []
    sockets: dict[str, int] = {}
    cores: dict[str, int] = {}
    physical, core, occurrences = "0", "0", 0
    flags: list[str] = []
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "flags" and not flags:
            flags = value.split()
        elif key in ("processor", "vendor_id", "model name", "Processor", "cpu", "Vendor"):
            processor.append(value)
            occurrences += key == "processor"
        elif key == "physical id":
            physical = value
            sockets.setdefault(physical, 1)
        elif key == "core id":
            core = value
            cores.setdefault(core, 1)
        elif key == "cpu cores":
            sockets[physical] = int(value)
        elif key == "siblings":
            cores[core] = int(value)
    count = len(sockets) or occurrences
    per_socket = next(iter(sockets.values()), 1)
    threads = round(next(iter(cores.values()), 1) / per_socket)
    return {
        "processor": processor,
        "processor_count": count,
        "processor_cores": per_socket,
        "processor_threads_per_core": threads,
        "processor_vcpus": threads * count * per_socket,
        "processor_nproc": len(os.sched_getaffinity(0)),
        "flags": flags,
    }


def dmi_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {}
    for fact, name in DMI.items():
        value = _read(f"/sys/devices/virtual/dmi/id/{name}")
        facts[fact] = value.strip() if value is not None else "NA"
    return facts


def hardware_facts() -> dict[str, Any]:
    uptime = (_read("/proc/uptime") or "0").split()[0]
    one, five, fifteen = os.getloadavg()
    return {
        **memory_facts(),
        **cpu_facts(),
        **dmi_facts(),
        "uptime_seconds": int(float(uptime)),
        "loadavg": {"1m": one, "5m": five, "15m": fifteen},
        **call("setup_virtual", {"collect": ["mounts"]}),
    }


def virtual_facts() -> dict[str, Any]:
    facts: dict[str, Any] = call("setup_virtual", {"collect": ["virtual"]})
    return facts


# ---- network --------------------------------------------------------------------------
def _ioctl_ipv4(sock: socket.socket, name: str, request: int) -> str | None:
    try:
        answer = fcntl.ioctl(sock.fileno(), request, struct.pack("256s", name.encode()[:15]))
    except OSError:
        return None
    return socket.inet_ntoa(answer[20:24])


def _ipv4(sock: socket.socket, name: str) -> dict[str, str] | None:
    address = _ioctl_ipv4(sock, name, _SIOCGIFADDR)
    netmask = _ioctl_ipv4(sock, name, _SIOCGIFNETMASK)
    if address is None or netmask is None:
        return None
    network = ipaddress.IPv4Network(f"{address}/{netmask}", strict=False)
    broadcast = "" if name == "lo" else (_ioctl_ipv4(sock, name, _SIOCGIFBRDADDR) or "")
    return {
        "address": address,
        "broadcast": broadcast,
        "netmask": netmask,
        "network": str(network.network_address),
        "prefix": str(network.prefixlen),
    }


def _ipv6_addresses() -> dict[str, list[dict[str, str]]]:
    found: dict[str, list[dict[str, str]]] = {}
    for line in (_read("/proc/net/if_inet6") or "").splitlines():
        words = line.split()
        if len(words) < 6:
            continue
        address = str(ipaddress.IPv6Address(bytes.fromhex(words[0])))
        entry = {"address": address, "prefix": str(int(words[2], 16)), "scope": _IPV6_SCOPES.get(words[3], words[3])}
        found.setdefault(words[5], []).append(entry)
    return found


def _interface(sock: socket.socket, name: str, ipv6: list[dict[str, str]]) -> dict[str, Any]:
    base = f"/sys/class/net/{name}/"
    flags = int((_read(base + "flags") or "0").strip() or "0", 16)
    kind = _IF_TYPES.get((_read(base + "type") or "").strip(), "unknown")
    facts: dict[str, Any] = {
        "device": name,
        "active": bool(flags & 0x1),
        "promisc": bool(flags & 0x100),
        "type": kind,
        "mtu": int((_read(base + "mtu") or "0").strip() or "0"),
    }
    if os.path.exists(base + "device"):
        facts["pciid"] = os.path.basename(os.path.realpath(base + "device"))
        facts["speed"] = int((_read(base + "speed") or "-1").strip() or "-1")
        driver = base + "device/driver/module"
        if os.path.exists(driver):
            facts["module"] = os.path.basename(os.path.realpath(driver))
    mac = (_read(base + "address") or "").strip()
    if mac and kind != "loopback":
        facts["macaddress"] = mac
    ipv4 = _ipv4(sock, name)
    if ipv4:
        facts["ipv4"] = ipv4
    if ipv6:
        facts["ipv6"] = ipv6
    return facts


def _default_ipv4_route() -> tuple[str, str] | None:
    best: tuple[int, str, str] | None = None
    for line in (_read("/proc/net/route") or "").splitlines()[1:]:
        words = line.split()
        if len(words) > 7 and words[1] == "00000000" and int(words[3], 16) & 0x2:
            gateway = socket.inet_ntoa(struct.pack("<I", int(words[2], 16)))
            if best is None or int(words[6]) < best[0]:
                best = (int(words[6]), words[0], gateway)
    return (best[1], best[2]) if best else None


def _default_ipv6_route() -> tuple[str, str] | None:
    for line in (_read("/proc/net/ipv6_route") or "").splitlines():
        words = line.split()
        if len(words) == 10 and words[0] == "0" * 32 and words[1] == "00" and words[9] != "lo":
            return words[9], str(ipaddress.IPv6Address(bytes.fromhex(words[4])))
    return None


def _default_ipv4(interfaces: dict[str, dict[str, Any]]) -> dict[str, Any]:
    route = _default_ipv4_route()
    if route is None or route[0] not in interfaces:
        return {}
    iface = interfaces[route[0]]
    extra = {"macaddress": iface.get("macaddress", "unknown"), "mtu": iface["mtu"], "type": iface["type"]}
    return {**iface.get("ipv4", {}), "alias": route[0], "gateway": route[1], "interface": route[0], **extra}


def _default_ipv6(interfaces: dict[str, dict[str, Any]]) -> dict[str, Any]:
    route = _default_ipv6_route()
    if route is None or route[0] not in interfaces:
        return {}
    iface = interfaces[route[0]]
    global_ = [a for a in iface.get("ipv6", []) if a["scope"] == "global"]
    extra = {"macaddress": iface.get("macaddress", "unknown"), "mtu": iface["mtu"], "type": iface["type"]}
    return {**(global_[0] if global_ else {}), "gateway": route[1], "interface": route[0], **extra}


def network_facts() -> dict[str, Any]:
    names = sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else []
    ipv6 = _ipv6_addresses()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        interfaces = {name: _interface(sock, name, ipv6.get(name, [])) for name in names}
    facts: dict[str, Any] = {f"{name.replace('-', '_').replace('.', '_')}": body for name, body in interfaces.items()}
    facts["interfaces"] = names
    facts["all_ipv4_addresses"] = [
        i["ipv4"]["address"] for i in interfaces.values() if "ipv4" in i and i["type"] != "loopback"
    ]
    facts["all_ipv6_addresses"] = [
        a["address"] for i in interfaces.values() for a in i.get("ipv6", []) if a["scope"] != "host"
    ]
    facts["default_ipv4"] = _default_ipv4(interfaces)
    facts["default_ipv6"] = _default_ipv6(interfaces)
    return facts


COLLECTORS: dict[str, Callable[[], dict[str, Any]]] = {
    "min": min_facts,
    "hardware": hardware_facts,
    "network": network_facts,
    "virtual": virtual_facts,
}
# Ansible's collector names that fall in the minimal subset (always gathered unless !min)
MIN_NAMES = frozenset(
    [
        "apparmor",
        "caps",
        "chroot",
        "cmdline",
        "date_time",
        "distribution",
        "dns",
        "env",
        "fips",
        "local",
        "lsb",
        "pkg_mgr",
        "platform",
        "python",
        "selinux",
        "service_mgr",
        "ssh_pub_keys",
        "user",
    ]
)
# subsets Ansible accepts that name nothing gathered here (ohai, facter)
UNGATHERED = frozenset({"ohai", "facter"})
GROUP_OF = {
    "hardware": "hardware",
    "dmi": "hardware",
    "network": "network",
    "interfaces": "network",
    "virtual": "virtual",
}


def _bad_subset(name: str) -> ValueError:
    allowed = ", ".join(sorted({*GROUP_OF, *MIN_NAMES, *UNGATHERED, "min"}))
    return ValueError(f"Bad subset '{name}' given to Ansible. gather_subset options allowed: all, {allowed}")


def subsets(spec: list[str]) -> list[str]:
    """Ansible's reading of ``gather_subset``: the minimal set always, ``all`` adds every
    subset, ``!x`` removes one (``!all`` all but the minimal set), unless named explicitly."""
    groups: set[str] = set()
    excluded: set[str] = set()
    explicit: set[str] = set()
    for subset in ["min", *spec]:
        name = subset[1:] if subset.startswith("!") else subset
        if subset == "all":
            groups.update(COLLECTORS)
        elif subset == "!all":
            excluded.update(set(COLLECTORS) - {"min"})
        elif subset.startswith("!"):
            excluded.add("min" if name == "min" else GROUP_OF.get(name, name))
        elif name == "min" or name in MIN_NAMES or name in UNGATHERED:
            groups.add("min")
        elif name in GROUP_OF:
            groups.add(GROUP_OF[name])
            explicit.add(GROUP_OF[name])
        else:
            raise _bad_subset(name)
    groups -= excluded - explicit
    return [group for group in COLLECTORS if group in groups]


def _spec(value: Any) -> list[str]:
    if value is None:
        return ["all"]
    items = value.split(",") if isinstance(value, str) else value
    return [part for item in items for part in (p.strip() for p in str(item).split(",")) if part]


def main(args: dict[str, Any]) -> dict[str, Any]:
    """``args["gather_subset"]``: a list, or a comma-separated string (default ``all``)."""
    spec = _spec(args.get("gather_subset"))
    facts: dict[str, Any] = {}
    for group in subsets(spec):
        facts.update(COLLECTORS[group]())
    return {**facts, "gather_subset": spec, "module_setup": True}
