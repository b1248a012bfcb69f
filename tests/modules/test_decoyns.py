"""The decoy namespace holds while the host changes under it.

Real: util-linux unshare and nsenter, overlayfs, tmpfs, glibc's passwd lookup (pwd), mv's
rename. The "host" here is itself a private mount namespace whose /etc is an overlay on a
tmpfs, so the rename that plays useradd never touches this machine's /etc/passwd.
"""

from __future__ import annotations

from decoyns import run_in_decoy_namespace

# The launcher's own namespace stands for the host: /etc overlaid, so writes stay in a tmpfs.
FAKE_HOST = (
    "unshare",
    "--mount",
    "--propagation",
    "private",
    "sh",
    "-c",
    "set -e; mount -t tmpfs fake-host /mnt; mkdir /mnt/u /mnt/w;"
    " mount -t overlay -o lowerdir=/etc,upperdir=/mnt/u,workdir=/mnt/w fake-host-etc /etc;"
    ' umount -l /mnt; "$@"',
    "fake-host",
)


def test_decoy_accounts_survive_the_host_renaming_a_new_passwd_into_place():
    """Broken once (the decoy passwd bind-mounted over /etc/passwd, as the ensure_absent
    test did): the rename detached the mount and the decoy account was gone, which is how
    the decoy home /srv/homes/ops lost its protection and was removed in some runs."""
    result = run_in_decoy_namespace(
        """
        import pwd
        add_decoy_user("rigger-decoy-ops", 4242, "/srv/homes/ops")
        before = pwd.getpwnam("rigger-decoy-ops").pw_dir
        # what useradd does on the host: a new file renamed over /etc/passwd
        subprocess.run(["nsenter", "--target", str(os.getppid()), "--mount", "sh", "-c",
                        "cp /etc/passwd /etc/passwd.new && mv /etc/passwd.new /etc/passwd"], check=True)
        try:
            after = pwd.getpwnam("rigger-decoy-ops").pw_dir
        except KeyError:
            after = None
        result = {"before": before, "after": after}
        """,
        launcher=FAKE_HOST,
    )
    assert result == {"before": "/srv/homes/ops", "after": "/srv/homes/ops"}
