//! The metadata service kept to root on a login node (issue 56, item 6),
//! on a real netfilter: in a network namespace this test creates, a
//! stand-in metadata service listens on 169.254.169.254:80, and the node
//! build's `imds-guard` runs as the boot unit runs it. A login user (uid
//! 65534) must get nothing; root must; the opt-out (`--open`) and an
//! allowed user (`--allow-user`) get through; a firewall rule put above
//! the guard makes `--check` say open, and the next run puts it first again.

use std::process::Command;

use crate::common::support::node_binary;

/// Runs `script` in a new network and mount namespace; its stdout.
fn in_namespace(script: &str) -> String {
    let out = Command::new("unshare")
        .args(["--net", "--mount", "--", "bash", "-c", script])
        .output()
        .expect("unshare (util-linux)");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the namespace script failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `name=value` lines of the script's output.
fn value<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name}= in:\n{out}"))
}

#[test]
fn a_login_user_gets_nothing_from_the_metadata_service_and_the_opt_out_restores_it() {
    assert!(
        ["iptables", "iptables-restore", "ip6tables"]
            .iter()
            .all(|t| ["/usr/sbin", "/sbin"]
                .iter()
                .any(|d| std::path::Path::new(d).join(t).is_file())),
        "iptables is missing: run make deps"
    );
    let docroot = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(docroot.path().join("latest/meta-data")).unwrap();
    std::fs::write(
        docroot.path().join("latest/meta-data/instance-id"),
        "i-0123456789abcdef0",
    )
    .unwrap();
    let hk = node_binary();
    let script = format!(
        r#"set -euo pipefail
ip link set lo up
ip addr add 169.254.169.254/32 dev lo
/usr/bin/python3 -m http.server 80 --bind 169.254.169.254 --directory {docroot} >/dev/null 2>&1 &
server=$!
trap 'kill $server' EXIT
get() {{ /usr/bin/python3 -c 'import urllib.request as u
try: print(u.urlopen("http://169.254.169.254/latest/meta-data/instance-id", timeout=5).read().decode())
except OSError as e: print("refused:" + type(e).__name__)'; }}
as_uid() {{ local uid=$1; shift; setpriv --reuid="$uid" --regid="$uid" --clear-groups "$@"; }}
deadline=$((SECONDS + 30))
until [ "$(get)" = i-0123456789abcdef0 ]; do [ $SECONDS -lt $deadline ] || exit 1; done
echo "before_user=$(as_uid 65534 bash -c "$(declare -f get); get")"
{hk} imds-guard --output json > /dev/null
{hk} imds-guard --output json > /dev/null
echo "guarded_json=$({hk} imds-guard --check --output json | tr -d '\n')"
echo "jumps=$(iptables -S OUTPUT | grep -c HOSTKEYCTL-IMDS)"
echo "root=$(get)"
echo "user=$(as_uid 65534 bash -c "$(declare -f get); get")"
{hk} imds-guard --allow-user 65534 --output json > /dev/null
echo "allowed_user=$(as_uid 65534 bash -c "$(declare -f get); get")"
echo "other_user=$(as_uid 1 bash -c "$(declare -f get); get")"
iptables -I OUTPUT 1 -j ACCEPT
set +e
{hk} imds-guard --check --output json > /dev/null
echo "check_behind=$?"
set -e
{hk} imds-guard --output json > /dev/null
echo "first_again=$(iptables -S OUTPUT | grep '^-A OUTPUT' | head -1)"
echo "user_again=$(as_uid 65534 bash -c "$(declare -f get); get")"
{hk} imds-guard --open --output json > /dev/null
set +e
{hk} imds-guard --check --output json > /dev/null
echo "check_open=$?"
set -e
echo "opened_user=$(as_uid 65534 bash -c "$(declare -f get); get")"
echo "chains=$(iptables -S | grep -c HOSTKEYCTL-IMDS || true)"
"#,
        docroot = docroot.path().display(),
        hk = hk.display(),
    );
    let out = in_namespace(&script);
    assert_eq!(value(&out, "before_user"), "i-0123456789abcdef0", "open before:\n{out}");
    let guarded: serde_json::Value = serde_json::from_str(value(&out, "guarded_json")).unwrap();
    assert_eq!(guarded[0]["state"], "root_only", "{guarded}");
    assert_eq!(guarded[0]["destination"], "169.254.169.254/32");
    assert_eq!(guarded[1]["state"], "root_only", "the IPv6 endpoint too: {guarded}");
    assert_eq!(value(&out, "jumps"), "1", "a second run added nothing");
    assert_eq!(value(&out, "root"), "i-0123456789abcdef0");
    assert!(value(&out, "user").starts_with("refused:"), "{out}");
    assert_eq!(value(&out, "allowed_user"), "i-0123456789abcdef0");
    assert!(value(&out, "other_user").starts_with("refused:"), "{out}");
    assert_eq!(value(&out, "check_behind"), "1", "a rule above the guard is open");
    assert!(value(&out, "first_again").ends_with("-j HOSTKEYCTL-IMDS"), "{out}");
    assert!(value(&out, "user_again").starts_with("refused:"), "{out}");
    assert_eq!(value(&out, "check_open"), "1");
    assert_eq!(value(&out, "opened_user"), "i-0123456789abcdef0");
    assert_eq!(value(&out, "chains"), "0", "--open leaves no chain");
}
