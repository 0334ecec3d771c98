//! A bed node's netfilter: a network namespace the test creates (`ip
//! netns add`), and stand-ins for `iptables`, `ip6tables` and their
//! `-restore` that run the real tools in it. The lifecycle step and
//! `imds-guard` then change real rules, never the test machine's own, and
//! [`NodeNetfilter::metadata_as`] asks a stand-in metadata service there as
//! any user.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The namespace, removed on drop when the test made it.
pub struct NodeNetfilter {
    name: String,
    owned: bool,
}

impl NodeNetfilter {
    /// A new namespace, and the stand-ins in `bin` (first on the node's
    /// PATH).
    pub fn new(bin: &Path) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("hk-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::SeqCst));
        let made = Command::new("ip").args(["netns", "add", &name]).status().unwrap();
        assert!(made.success(), "ip netns add {name} failed");
        standins(bin, &name);
        NodeNetfilter { name, owned: true }
    }

    /// A bare bed's nodes' namespace (`bed.json`'s `netns`, which their
    /// SSM commands use), and stand-ins for it in `bin`: a step run from
    /// `bin` and a check sent through SSM see the same rules.
    pub fn of_bed(netns: &str, bin: &Path) -> Self {
        standins(bin, netns);
        NodeNetfilter {
            name: netns.to_owned(),
            owned: false,
        }
    }

    /// What uid `uid` gets from a metadata service at 169.254.169.254 in
    /// the namespace: its answer, or `refused:ERROR`. The service is up
    /// (root reaches it through any guard) before the user asks.
    pub fn metadata_as(&self, uid: u32) -> String {
        let docroot = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(docroot.path().join("latest/meta-data")).unwrap();
        std::fs::write(
            docroot.path().join("latest/meta-data/instance-id"),
            "i-0123456789abcdef0",
        )
        .unwrap();
        let script = format!(
            r#"set -eu
ip link set lo up
ip addr add 169.254.169.254/32 dev lo 2>/dev/null || true
/usr/bin/python3 -m http.server 80 --bind 169.254.169.254 --directory {docroot} >/dev/null 2>&1 &
server=$!
trap 'kill $server' EXIT
get() {{ /usr/bin/python3 -c 'import urllib.request as u
try: print(u.urlopen("http://169.254.169.254/latest/meta-data/instance-id", timeout=5).read().decode())
except OSError as e: print("refused:" + type(e).__name__)'; }}
deadline=$((SECONDS + 30))
until [ "$(get)" = i-0123456789abcdef0 ]; do [ $SECONDS -lt $deadline ] || exit 1; done
setpriv --reuid={uid} --regid={uid} --clear-groups bash -c "$(declare -f get); get"
"#,
            docroot = docroot.path().display()
        );
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name, "bash", "-c", &script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the metadata stand-in did not answer root: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for NodeNetfilter {
    fn drop(&mut self) {
        if self.owned {
            let _ = Command::new("ip").args(["netns", "delete", &self.name]).status();
        }
    }
}

/// `iptables`, `ip6tables` and their `-restore` in `bin`, running the real
/// tools in the namespace `name`.
fn standins(bin: &Path, name: &str) {
    for tool in ["iptables", "ip6tables", "iptables-restore", "ip6tables-restore"] {
        let real = ["/usr/sbin", "/sbin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.is_file())
            .unwrap_or_else(|| panic!("{tool} is missing: run make deps"));
        let path = bin.join(tool);
        std::fs::write(
            &path,
            format!("#!/bin/sh\nexec ip netns exec {name} {} \"$@\"\n", real.display()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}
