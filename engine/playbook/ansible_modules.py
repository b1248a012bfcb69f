"""The module names ansible-core 2.19 knows, so that a refusal of one rigger lacks names it
as an Ansible module instead of suggesting a rigger module of a close spelling (a
"did you mean 'apt_key'" for ``rpm_key`` sends the user to the wrong module)."""

from __future__ import annotations

# Every module of the ansible.builtin collection in ansible-core 2.19 (its module index),
# plus ``yum``, which 2.19 routes to ``dnf``.
CORE_MODULES = frozenset(
    [
        "add_host",
        "apt",
        "apt_key",
        "apt_repository",
        "assemble",
        "assert",
        "async_status",
        "blockinfile",
        "command",
        "copy",
        "cron",
        "deb822_repository",
        "debconf",
        "debug",
        "dnf",
        "dnf5",
        "dpkg_selections",
        "expect",
        "fail",
        "fetch",
        "file",
        "find",
        "gather_facts",
        "get_url",
        "getent",
        "git",
        "group",
        "group_by",
        "hostname",
        "import_playbook",
        "import_role",
        "import_tasks",
        "include_role",
        "include_tasks",
        "include_vars",
        "iptables",
        "known_hosts",
        "lineinfile",
        "meta",
        "mount_facts",
        "package",
        "package_facts",
        "pause",
        "ping",
        "pip",
        "raw",
        "reboot",
        "replace",
        "rpm_key",
        "script",
        "service",
        "service_facts",
        "set_fact",
        "set_stats",
        "setup",
        "shell",
        "slurp",
        "stat",
        "subversion",
        "systemd",
        "systemd_service",
        "sysvinit",
        "tempfile",
        "template",
        "unarchive",
        "uri",
        "user",
        "validate_argument_spec",
        "wait_for",
        "wait_for_connection",
        "yum",
        "yum_repository",
    ]
)

# Bare names ansible-core 2.19 routes to a collection (lib/ansible/config/
# ansible_builtin_runtime.yml), as playbooks written before collections still use them.
# Only names such playbooks commonly use are listed; rigger's own collection modules
# (sysctl, mount, authorized_key, modprobe, timezone) are resolved before this table is asked.
ROUTED_MODULES = {
    "acl": "ansible.posix.acl",
    "alternatives": "community.general.alternatives",
    "at": "ansible.posix.at",
    "capabilities": "community.general.capabilities",
    "docker_compose": "community.docker.docker_compose",
    "docker_container": "community.docker.docker_container",
    "docker_image": "community.docker.docker_image",
    "docker_network": "community.docker.docker_network",
    "filesystem": "community.general.filesystem",
    "firewalld": "ansible.posix.firewalld",
    "helm": "kubernetes.core.helm",
    "homebrew": "community.general.homebrew",
    "htpasswd": "community.general.htpasswd",
    "ini_file": "community.general.ini_file",
    "k8s": "kubernetes.core.k8s",
    "kernel_blacklist": "community.general.kernel_blacklist",
    "locale_gen": "community.general.locale_gen",
    "lvg": "community.general.lvg",
    "lvol": "community.general.lvol",
    "make": "community.general.make",
    "mysql_db": "community.mysql.mysql_db",
    "mysql_user": "community.mysql.mysql_user",
    "nmcli": "community.general.nmcli",
    "npm": "community.general.npm",
    "open_iscsi": "community.general.open_iscsi",
    "openssl_certificate": "community.crypto.x509_certificate",
    "openssl_csr": "community.crypto.openssl_csr",
    "openssl_privatekey": "community.crypto.openssl_privatekey",
    "pacman": "community.general.pacman",
    "pam_limits": "community.general.pam_limits",
    "parted": "community.general.parted",
    "patch": "ansible.posix.patch",
    "postgresql_db": "community.postgresql.postgresql_db",
    "postgresql_user": "community.postgresql.postgresql_user",
    "redhat_subscription": "community.general.redhat_subscription",
    "rhsm_repository": "community.general.rhsm_repository",
    "seboolean": "ansible.posix.seboolean",
    "sefcontext": "community.general.sefcontext",
    "selinux": "ansible.posix.selinux",
    "snap": "community.general.snap",
    "synchronize": "ansible.posix.synchronize",
    "ufw": "community.general.ufw",
    "xml": "community.general.xml",
    "zypper": "community.general.zypper",
}


def lacked_module(name: str) -> str | None:
    """The refusal for a bare module name Ansible knows and rigger lacks; None for a name
    Ansible does not know either (then a "did you mean" may help)."""
    if name in CORE_MODULES:
        return f"module '{name}' is an Ansible module not available in rigger (`rigger modules` lists rigger's)"
    if name in ROUTED_MODULES:
        return (
            f"module '{name}' is an Ansible module not available in rigger "
            f"(Ansible routes it to {ROUTED_MODULES[name]}; `rigger modules` lists rigger's)"
        )
    return None
