//! Making sshd serve only the managed host key types.
//!
//! A node may hold host keys of other types (DSA, ECDSA P-384, a key an
//! image baked in). Serving any of them means some client still sees a
//! per-node key. hostkeyctl pins sshd's `HostKeyAlgorithms` to the managed
//! set; the key files themselves are left alone, so the change is undone by
//! deleting one line or file (docs/install.md).
//!
//! `HostKeyAlgorithms` is first-match-wins in sshd_config. Where the main
//! config includes `sshd_config.d/*.conf` before setting it (Debian, Ubuntu,
//! Amazon Linux 2023, RHEL 9), the setting goes into the drop-in
//! `sshd_config.d/00-hostkeyctl.conf`; otherwise into a marked block at the
//! top of the main config.

use std::path::{Path, PathBuf};

use crate::keyset::KeyAlgorithm;

/// The drop-in file name (sorts first, so it wins).
pub const DROP_IN_NAME: &str = "00-hostkeyctl.conf";
/// First line of the inline block.
pub const BEGIN_MARK: &str = "# BEGIN hostkeyctl: serve only the canonical host keys (docs/install.md)";
/// Last line of the inline block.
pub const END_MARK: &str = "# END hostkeyctl";

/// Where the setting goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A drop-in file the main config includes.
    DropIn(PathBuf),
    /// A block at the top of the main config, which has no suitable Include.
    Inline(PathBuf),
}

impl Placement {
    /// The file that holds the setting.
    pub fn path(&self) -> &Path {
        match self {
            Placement::DropIn(p) | Placement::Inline(p) => p,
        }
    }
}

/// The `HostKeyAlgorithms` value for a set. With `certificates`, the
/// certificate algorithms of the same types come first, except the SHA-1
/// `ssh-rsa-cert-v01@openssh.com` (as `ssh-rsa` itself is left out).
pub fn host_key_algorithms(algorithms: &[KeyAlgorithm], certificates: bool) -> String {
    let mut plain = Vec::new();
    for a in [KeyAlgorithm::Ed25519, KeyAlgorithm::Ecdsa, KeyAlgorithm::Rsa] {
        if algorithms.contains(&a) {
            match a {
                KeyAlgorithm::Rsa => plain.extend(["rsa-sha2-512", "rsa-sha2-256"]),
                other => plain.push(other.key_type()),
            }
        }
    }
    let mut names: Vec<String> = Vec::new();
    if certificates {
        names.extend(plain.iter().map(|n| format!("{n}-cert-v01@openssh.com")));
    }
    names.extend(plain.iter().map(|n| (*n).to_owned()));
    names.join(",")
}

/// What hostkeyctl's sshd settings say.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// The managed key types.
    pub algorithms: Vec<KeyAlgorithm>,
    /// Whether certificates are served (their algorithms are pinned too).
    pub certificates: bool,
    /// The explicit `HostKey` list of an overlap (may be empty).
    pub host_keys: Vec<String>,
    /// `HostCertificate` files hostkeyctl installed.
    pub host_certificates: Vec<String>,
    /// `VersionAddendum`: while the node serves a next set, the word that
    /// names it in sshd's banner ([`crate::keyset::KeySet::next_marker`]),
    /// so a scan sees that sshd loaded it.
    pub version_addendum: Option<String>,
    /// `KexAlgorithms`: the post-quantum hybrids sshd holds first, then
    /// what the configuration allowed ([`super::kex`]).
    pub kex_algorithms: Option<String>,
}

/// `text` with every `Include` of the drop-in directory pointed at `to`
/// instead (the same file patterns): a trial copy of the configuration
/// whose drop-ins are copies ([`super::kex`]).
pub fn redirect_drop_in_includes(ssh_dir: &Path, text: &str, to: &Path) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let is_include = words.next().is_some_and(|w| w.eq_ignore_ascii_case("include"));
        if !is_include {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let args: Vec<String> = words
            .map(|arg| {
                if includes_drop_in(ssh_dir, std::iter::once(arg)) {
                    let pattern = Path::new(arg).file_name().map(|n| n.to_string_lossy().into_owned());
                    to.join(pattern.unwrap_or_default()).display().to_string()
                } else {
                    arg.to_owned()
                }
            })
            .collect();
        out.push_str(&format!("Include {}\n", args.join(" ")));
    }
    out
}

/// Whether an `Include` line's arguments take in hostkeyctl's drop-in.
fn includes_drop_in<'a>(ssh_dir: &Path, args: impl Iterator<Item = &'a str>) -> bool {
    let drop_in_dir = ssh_dir.join("sshd_config.d");
    args.into_iter().any(|arg| {
        let resolved = if Path::new(arg).is_absolute() {
            PathBuf::from(arg)
        } else {
            ssh_dir.join(arg)
        };
        match (resolved.parent(), resolved.file_name()) {
            (Some(dir), Some(pattern)) => {
                dir == drop_in_dir && include_matches(&pattern.to_string_lossy(), DROP_IN_NAME)
            }
            _ => false,
        }
    })
}

/// Decides where the setting goes, from the main config's text.
pub fn placement(ssh_dir: &Path, main_config: &Path, text: &str) -> Placement {
    let drop_in_dir = ssh_dir.join("sshd_config.d");
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut words = line.split_whitespace();
        let keyword = words.next().unwrap_or_default().to_ascii_lowercase();
        match keyword.as_str() {
            // Settings inside Match blocks are conditional: stop looking.
            "match" | "hostkeyalgorithms" => break,
            "include" if includes_drop_in(ssh_dir, &mut words) => {
                return Placement::DropIn(drop_in_dir.join(DROP_IN_NAME));
            }
            _ => {}
        }
    }
    Placement::Inline(main_config.to_owned())
}

/// The settings hostkeyctl manages: the pinned `HostKeyAlgorithms`, and
/// during a rotation's overlap phase the explicit `HostKey` list (current
/// keys first, so they stay the ones served, then the next set's keys,
/// which OpenSSH clients with `UpdateHostKeys` learn after logging in).
pub fn settings(s: &Settings) -> String {
    let mut out = format!(
        "HostKeyAlgorithms {}\n",
        host_key_algorithms(&s.algorithms, s.certificates)
    );
    if let Some(kex) = &s.kex_algorithms {
        out.push_str(&format!("KexAlgorithms {kex}\n"));
    }
    for path in &s.host_keys {
        out.push_str(&format!("HostKey {path}\n"));
    }
    for path in &s.host_certificates {
        out.push_str(&format!("HostCertificate {path}\n"));
    }
    if let Some(addendum) = &s.version_addendum {
        out.push_str(&format!("VersionAddendum {addendum}\n"));
    }
    out
}

/// The drop-in file's content.
pub fn drop_in_content(s: &Settings) -> String {
    format!(
        "# Managed by hostkeyctl: serve only the canonical host key set.\n# Delete this file to undo (docs/install.md).\n{}",
        settings(s)
    )
}

/// The lines of hostkeyctl's own settings block in a main config.
pub fn block_text(text: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line == BEGIN_MARK {
            inside = true;
        } else if line == END_MARK {
            inside = false;
        } else if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// First line of the block that adds the next set's host keys during a
/// rotation's overlap, when other HostKey lines exist (they must come first).
pub const NEXT_BEGIN: &str = "# BEGIN hostkeyctl next host keys: rotation overlap (docs/install.md)";
/// Last line of that block.
pub const NEXT_END: &str = "# END hostkeyctl next host keys";

fn strip_block(text: &str, begin: &str, end: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in text.lines() {
        if line == begin {
            inside = true;
            continue;
        }
        if inside {
            if line == end {
                inside = false;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A hostkeyctl block in a config file is damaged: stripping it could
/// remove the admin's own lines, so nothing is written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {detail}")]
pub struct BlockError {
    /// The 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub detail: String,
}

/// Checks that every hostkeyctl marker in `text` is intact and paired. A
/// line that looks like a marker but is not exactly one, a BEGIN inside a
/// block, an END outside one or of another block, and a block with no END
/// are all refused.
pub fn check_blocks(text: &str) -> Result<(), BlockError> {
    let mut open: Option<(&str, usize)> = None;
    let mut last = 0;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        last = n;
        let trimmed = line.trim();
        let looks_like = trimmed.starts_with("# BEGIN hostkeyctl") || trimmed.starts_with("# END hostkeyctl");
        if !looks_like {
            continue;
        }
        let fail = |detail: String| Err(BlockError { line: n, detail });
        match (line, open) {
            (l, None) if l == BEGIN_MARK || l == NEXT_BEGIN => open = Some((l, n)),
            (l, Some((begin, start))) if l == BEGIN_MARK || l == NEXT_BEGIN => {
                return fail(format!(
                    "a hostkeyctl block starts before the one from line {start} ({begin:?}) ends"
                ));
            }
            (l, Some((begin, _)))
                if (l == END_MARK && begin == BEGIN_MARK) || (l == NEXT_END && begin == NEXT_BEGIN) =>
            {
                open = None;
            }
            (l, _) if l == END_MARK || l == NEXT_END => {
                return fail("a hostkeyctl END marker without its BEGIN".to_owned());
            }
            _ => {
                return fail(format!(
                    "damaged hostkeyctl marker {}; restore it to {BEGIN_MARK:?} or {END_MARK:?} (or the next-keys pair), or remove the block by hand",
                    crate::escape::quoted_prefix(line, 100)
                ));
            }
        }
    }
    match open {
        Some((_, start)) => Err(BlockError {
            line: last.max(start),
            detail: format!("the hostkeyctl block that starts at line {start} has no END marker"),
        }),
        None => Ok(()),
    }
}

/// The main config without any hostkeyctl block (call [`check_blocks`]
/// first: a damaged block is not stripped safely).
pub fn strip_blocks(text: &str) -> String {
    strip_block(&strip_block(text, BEGIN_MARK, END_MARK), NEXT_BEGIN, NEXT_END)
}

/// Whether any of these config texts has a `HostKey` line (then sshd's
/// default host key list does not apply).
pub fn has_host_key_lines(texts: &[String]) -> bool {
    !keyword_values(texts, "hostkey").is_empty()
}

/// The values of every `keyword` line in these config texts (keywords are
/// case-insensitive, as sshd reads them).
pub fn keyword_values(texts: &[String], keyword: &str) -> Vec<String> {
    texts
        .iter()
        .flat_map(|t| t.lines())
        .filter_map(|line| {
            let line = line.trim();
            let (word, rest) = line.split_once(char::is_whitespace)?;
            word.eq_ignore_ascii_case(keyword).then(|| rest.trim().to_owned())
        })
        .collect()
}

/// The main config as hostkeyctl wants it: its own lines untouched, with
/// the settings block at the top when `top` is given (no usable Include),
/// and the next host keys before the first `Match` (HostKey is not allowed
/// inside one) when `next_keys` is given.
pub fn main_config_content(main_text: &str, top: Option<&str>, next_keys: &[String]) -> String {
    let base = strip_blocks(main_text);
    let mut body = String::new();
    if next_keys.is_empty() {
        body = base;
    } else {
        let block: String = std::iter::once(format!("{NEXT_BEGIN}\n"))
            .chain(next_keys.iter().map(|k| format!("HostKey {k}\n")))
            .chain(std::iter::once(format!("{NEXT_END}\n")))
            .collect();
        let mut placed = false;
        for line in base.lines() {
            let first = line.split_whitespace().next().unwrap_or_default();
            if !placed && first.eq_ignore_ascii_case("match") {
                body.push_str(&block);
                placed = true;
            }
            body.push_str(line);
            body.push('\n');
        }
        if !placed {
            body.push_str(&block);
        }
    }
    match top {
        Some(settings) => format!("{BEGIN_MARK}\n{settings}{END_MARK}\n{body}"),
        None => body,
    }
}

/// The main config with the inline block (re)placed at the top.
pub fn inline_content(main_text: &str, s: &Settings) -> String {
    main_config_content(main_text, Some(&settings(s)), &[])
}

/// Whether an `Include` pattern matches a file name, as sshd's glob(3)
/// does: `*`, `?` and `[...]`, and no wildcard matches a leading dot.
pub fn include_matches(pattern: &str, name: &str) -> bool {
    if name.starts_with('.') && !pattern.starts_with('.') {
        return false;
    }
    globset::GlobBuilder::new(pattern)
        .literal_separator(true)
        .build()
        .is_ok_and(|g| g.compile_matcher().is_match(name))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::{Placement, host_key_algorithms, inline_content, placement};
    use crate::keyset::KeyAlgorithm;

    #[test]
    fn include_patterns_match_as_glob_does() {
        for (pattern, name, hit) in [
            ("*.conf", "00-hostkeyctl.conf", true),
            ("0?-*.conf", "00-hostkeyctl.conf", true),
            ("[0-9]*.conf", "00-hostkeyctl.conf", true),
            ("*.cfg", "00-hostkeyctl.conf", false),
            ("*", ".hidden.conf", false),
            ("00-hostkeyctl.conf", "00-hostkeyctl.conf", true),
        ] {
            assert_eq!(super::include_matches(pattern, name), hit, "{pattern} vs {name}");
        }
    }

    /// Regression (hardening finding 3): one stray character on an END line
    /// made the stripper drop everything to the end of the file.
    #[test]
    fn damaged_or_unpaired_markers_are_refused_with_the_line() {
        use super::{BEGIN_MARK, END_MARK, check_blocks};
        let good = format!(
            "Port 22\n{BEGIN_MARK}\nHostKeyAlgorithms x\n{END_MARK}\nMatch User a\n  ForceCommand /bin/false\n"
        );
        assert_eq!(check_blocks(&good), Ok(()));
        let damaged = good.replace(&format!("{END_MARK}\n"), &format!("{END_MARK}x\n"));
        let err = check_blocks(&damaged).unwrap_err();
        assert_eq!(err.line, 4, "{err}");
        assert!(err.detail.contains("damaged hostkeyctl marker"), "{err}");
        let no_end = format!("{BEGIN_MARK}\nHostKeyAlgorithms x\nMatch User a\n");
        assert!(check_blocks(&no_end).unwrap_err().detail.contains("has no END marker"));
        let stray_end = format!("Port 22\n{END_MARK}\n");
        assert_eq!(check_blocks(&stray_end).unwrap_err().line, 2);
        let nested = format!("{BEGIN_MARK}\n{BEGIN_MARK}\n{END_MARK}\n");
        assert_eq!(check_blocks(&nested).unwrap_err().line, 2);
        let indented = format!("  {BEGIN_MARK}\n{END_MARK}\n");
        assert_eq!(check_blocks(&indented).unwrap_err().line, 1);
    }

    #[test]
    fn algorithms_value_follows_the_set() {
        assert_eq!(
            host_key_algorithms(&KeyAlgorithm::ALL, false),
            "ssh-ed25519,ecdsa-sha2-nistp256,rsa-sha2-512,rsa-sha2-256"
        );
        assert_eq!(host_key_algorithms(&[KeyAlgorithm::Ed25519], false), "ssh-ed25519");
        let with = host_key_algorithms(&KeyAlgorithm::ALL, true);
        assert!(
            with.starts_with("ssh-ed25519-cert-v01@openssh.com,ecdsa-sha2-nistp256-cert-v01@openssh.com,rsa-sha2-512-cert-v01@openssh.com,rsa-sha2-256-cert-v01@openssh.com,ssh-ed25519,"),
            "{with}"
        );
        assert!(!with.contains("ssh-rsa"), "the SHA-1 types stay out: {with}");
    }

    #[test]
    fn placement_uses_the_include_only_when_it_comes_first() {
        let dir = Path::new("/etc/ssh");
        let main = Path::new("/etc/ssh/sshd_config");
        let debian = "# comment\nInclude /etc/ssh/sshd_config.d/*.conf\nPort 22\n";
        assert_eq!(
            placement(dir, main, debian),
            Placement::DropIn("/etc/ssh/sshd_config.d/00-hostkeyctl.conf".into())
        );
        assert_eq!(
            placement(dir, main, "include sshd_config.d/*.conf\n"),
            Placement::DropIn("/etc/ssh/sshd_config.d/00-hostkeyctl.conf".into())
        );
        assert_eq!(placement(dir, main, "Port 22\n"), Placement::Inline(main.into()));
        let set_before = "HostKeyAlgorithms ssh-rsa\nInclude /etc/ssh/sshd_config.d/*.conf\n";
        assert_eq!(placement(dir, main, set_before), Placement::Inline(main.into()));
        let other_dir = "Include /etc/other/*.conf\n";
        assert_eq!(placement(dir, main, other_dir), Placement::Inline(main.into()));
        // A trial copy's includes of the drop-ins point at their copy.
        let both = "include sshd_config.d/*.conf /etc/crypto-policies/x.config\nPort 22\n";
        assert_eq!(
            super::redirect_drop_in_includes(dir, both, Path::new("/s/d")),
            "Include /s/d/*.conf /etc/crypto-policies/x.config\nPort 22\n"
        );
    }

    #[test]
    fn next_keys_go_before_the_first_match_and_come_off_again() {
        let main = "Port 22\nHostKey /a\nMatch User x\n  X11Forwarding no\n";
        let with = super::main_config_content(main, None, &["/next".to_owned()]);
        let next_at = with.find("HostKey /next").unwrap();
        assert!(
            with.find("HostKey /a").unwrap() < next_at && next_at < with.find("Match User").unwrap(),
            "{with}"
        );
        assert_eq!(super::main_config_content(&with, None, &[]), main);
        assert!(super::has_host_key_lines(&[main.to_owned()]));
        assert!(!super::has_host_key_lines(&["HostKeyAlgorithms x\n".to_owned()]));
        assert_eq!(
            super::keyword_values(
                &["  hostcertificate /c.pub\nHostKey /k\n".to_owned()],
                "HostCertificate"
            ),
            ["/c.pub"]
        );
    }

    #[test]
    fn inline_block_is_replaced_not_stacked() {
        let all = super::Settings {
            algorithms: KeyAlgorithm::ALL.to_vec(),
            certificates: true,
            host_keys: vec!["/k".to_owned()],
            host_certificates: vec!["/k-cert.pub".to_owned()],
            version_addendum: Some("hostkeyctl-next-0123456789ab".to_owned()),
            kex_algorithms: Some("sntrup761x25519-sha512@openssh.com,curve25519-sha256".to_owned()),
        };
        let once = inline_content("Port 22\n", &all);
        assert_eq!(
            super::keyword_values(&[super::block_text(&once)], "kexalgorithms"),
            ["sntrup761x25519-sha512@openssh.com,curve25519-sha256"]
        );
        assert_eq!(
            super::keyword_values(&[super::block_text(&once)], "hostcertificate"),
            ["/k-cert.pub"]
        );
        let ed = super::Settings {
            algorithms: vec![KeyAlgorithm::Ed25519],
            ..Default::default()
        };
        let twice = inline_content(&once, &ed);
        assert_eq!(twice.matches("HostKeyAlgorithms").count(), 1, "{twice}");
        assert!(twice.starts_with(super::BEGIN_MARK));
        assert!(twice.ends_with("Port 22\n"));
        assert!(
            !twice.contains("HostKey /k") && !twice.contains("HostCertificate"),
            "{twice}"
        );
    }
}
