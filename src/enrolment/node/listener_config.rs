//! The configuration of a login node's listener for the cluster
//! ([`super::listener`]): the main sshd's, copied with every file it
//! includes, the listener's own settings commented out; and the check
//! that every other setting stays the main sshd's.

use std::path::{Path, PathBuf};

use super::request::NodeError;

/// The settings the listener's configuration sets itself.
pub(super) const OWN: [&str; 8] = [
    "hostkey",
    "hostcertificate",
    "hostkeyalgorithms",
    "hostkeyagent",
    "port",
    "listenaddress",
    "pidfile",
    // install marks the set it serves on port 22 there; the listener
    // serves no set.
    "versionaddendum",
];
/// sshd's own limit on nested `Include`s.
const MAX_DEPTH: usize = 16;

/// Where a copy's directory goes in its text, replaced once it is known.
pub(super) const PLACE: &str = "\u{0}HOSTKEYCTL_COPY_DIR\u{0}";

/// The main config and every file it includes, each as `(name, text,
/// mode)` with the listener's own settings commented out and each
/// `Include` pointing at the copies (first: the main config's). An
/// `Include` keeps its place, inside a `Match` too, so each copy means
/// what its original means. An `Include` this cannot follow exactly as
/// sshd would (quoting it does not know, a wildcard in a directory, a
/// brace) is refused, never skipped: a file of `Match` blocks lost that
/// way would not show in `sshd -T`.
pub(super) fn copy_config(main: &Path) -> Result<Vec<(String, String, u32)>, NodeError> {
    // sshd reads a relative Include from its own directory, /etc/ssh,
    // wherever the config is: relative paths are followed there only.
    let base = main.parent().unwrap_or(Path::new("/")).to_path_buf();
    let mut copies: Vec<(PathBuf, String, String, u32)> = Vec::new();
    copy_file(main, &base, 0, &mut copies)?;
    Ok(copies
        .into_iter()
        .map(|(_, name, text, mode)| (name, text, mode))
        .collect())
}

fn refuse(path: &Path, line: &str, why: &str) -> NodeError {
    NodeError::Sshd(format!(
        "{}: `{}`: {why}; the cluster listener copies the main config exactly or not at all: write the Include plainly (full paths, each bare or in double quotes, wildcards * and ? in the file name only, no comment on the line), then enroll again",
        path.display(),
        crate::escape::escape(line.trim())
    ))
}

fn copy_file(
    path: &Path,
    base: &Path,
    depth: usize,
    copies: &mut Vec<(PathBuf, String, String, u32)>,
) -> Result<String, NodeError> {
    if depth > MAX_DEPTH {
        return Err(NodeError::Sshd(format!(
            "{} is included more than {MAX_DEPTH} levels deep (an Include loop?)",
            path.display()
        )));
    }
    if let Some((_, name, ..)) = copies.iter().find(|(p, ..)| p == path) {
        return Ok(name.clone());
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| NodeError::Sshd(format!("cannot read {}: {e}", path.display())))?;
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(path)
            .map_err(|e| NodeError::Sshd(format!("cannot read {}: {e}", path.display())))?
            .permissions(),
    ) & 0o644;
    let name = format!("{:02}.conf", copies.len());
    let index = copies.len();
    copies.push((path.to_path_buf(), name.clone(), String::new(), mode));
    let mut out = String::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let keyword = trimmed
            .split(|c: char| c.is_whitespace() || c == '=')
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        if OWN.contains(&keyword.as_str()) {
            out.push_str(&format!("# (the cluster listener sets its own) {line}\n"));
        } else if keyword == "include" {
            let args = trimmed[keyword.len()..].trim_start_matches(|c: char| c.is_whitespace() || c == '=');
            let mut targets = Vec::new();
            for arg in split_args(args).map_err(|why| refuse(path, line, &why))? {
                for found in expand(base, &arg).map_err(|why| refuse(path, line, &why))? {
                    targets.push(copy_file(&found, base, depth + 1, copies)?);
                }
            }
            if targets.is_empty() {
                // sshd includes nothing for a pattern that matches nothing.
                out.push_str(&format!("# (includes nothing now) {line}\n"));
            } else {
                let places: Vec<String> = targets.iter().map(|t| format!("\"{PLACE}/{t}\"")).collect();
                out.push_str(&format!("# {line}\nInclude {}\n", places.join(" ")));
            }
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    copies[index].2 = out;
    Ok(name)
}

/// An `Include`'s arguments: separated by blanks, each plain or in double
/// quotes. Single quotes and backslashes (which sshd also reads) are
/// refused rather than guessed at.
fn split_args(text: &str) -> Result<Vec<String>, String> {
    // A comment after the paths, `=` (which OpenSSH 8.2 splits at) and
    // anything but ASCII (blanks sshd does not split at) read differently
    // across sshd versions.
    if text.contains(['\'', '\\']) {
        return Err("a single quote or a backslash".to_owned());
    }
    if text.contains(['#', '=']) {
        return Err("a '#' or '=' (a comment or a separator that sshd versions read differently)".to_owned());
    }
    if !text.is_ascii() {
        return Err("a character that is not ASCII".to_owned());
    }
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let (arg, after) = quoted.split_once('"').ok_or("a quote with no end")?;
            if !after.is_empty() && !after.starts_with(char::is_whitespace) {
                return Err("text right after a closing quote".to_owned());
            }
            out.push(arg.to_owned());
            rest = after.trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let arg = &rest[..end];
            if arg.contains('"') {
                return Err("a quote inside an argument".to_owned());
            }
            out.push(arg.to_owned());
            rest = rest[end..].trim_start();
        }
    }
    Ok(out)
}

/// The files an `Include` argument names, as sshd's glob(3) finds them
/// (sorted; a relative path is the config directory's). A wildcard in a
/// directory, or a brace (which this matcher would read as a choice and
/// glob(3) does not), is refused.
fn expand(base: &Path, arg: &str) -> Result<Vec<PathBuf>, String> {
    if arg.contains(['{', '}']) {
        return Err("a brace".to_owned());
    }
    if arg.contains(['[', ']']) {
        return Err("a bracket (a glob(3) class this does not read as sshd does)".to_owned());
    }
    if !Path::new(arg).is_absolute() && base != Path::new("/etc/ssh") {
        return Err(format!(
            "a relative path, which sshd reads from /etc/ssh while this config is in {}",
            base.display()
        ));
    }
    let path = base.join(arg);
    let Some(pattern) = path.file_name().and_then(|n| n.to_str()) else {
        return Err("no file name".to_owned());
    };
    let parent = path.parent().unwrap_or(Path::new("/"));
    if parent.to_string_lossy().contains(['*', '?', '[']) {
        return Err("a wildcard in a directory".to_owned());
    }
    if !pattern.contains(['*', '?']) {
        return Ok(if path.is_file() { vec![path] } else { Vec::new() });
    }
    let mut found = Vec::new();
    for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let name = entry.file_name();
        // sshd matches bytes; this matches characters: only ASCII names
        // read the same.
        let Some(name) = name.to_str().filter(|n| n.is_ascii()) else {
            return Err(format!(
                "{} holds a file name that is not ASCII ({})",
                parent.display(),
                crate::escape::escape(&name.to_string_lossy())
            ));
        };
        if crate::install::sshd_config::include_matches(pattern, name) && entry.path().is_file() {
            found.push(entry.path());
        }
    }
    found.sort();
    Ok(found)
}

/// Every setting of `sshd -T` that the listener does not set itself is the
/// main sshd's: the same users log in the same way on both (an `Include`
/// the copy missed would show here).
pub(super) fn same_otherwise(main: &str, listener: &str) -> Result<(), String> {
    let others = |text: &str| -> std::collections::BTreeSet<String> {
        text.lines()
            .filter(|l| !OWN.contains(&l.split(' ').next().unwrap_or("")))
            .map(str::to_owned)
            .collect()
    };
    let (main, listener) = (others(main), others(listener));
    let differ: Vec<String> = main
        .symmetric_difference(&listener)
        .filter_map(|l| l.split(' ').next())
        .map(str::to_owned)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if differ.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "its {} would differ from the main sshd's (sshd -T of each shows how)",
            differ.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::{copy_config, split_args};

    #[test]
    fn the_copy_keeps_every_setting_but_what_the_listener_sets_and_follows_includes_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let etc = dir.path().join("etc");
        std::fs::create_dir_all(etc.join("sshd_config.d")).unwrap();
        std::fs::create_dir_all(etc.join("my dir")).unwrap();
        std::fs::write(
            etc.join("sshd_config"),
            "Include ETC/sshd_config.d/*.conf\nPort 22\nListenAddress 10.0.0.5:22\nHostKey /etc/ssh/ssh_host_ed25519_key\nPasswordAuthentication no\nMatch Group admins\n    Include \"ETC/my dir/admins extra\"\n    AllowTcpForwarding no\n"
                .replace("ETC", &etc.display().to_string()),
        )
        .unwrap();
        std::fs::write(
            etc.join("sshd_config.d/00-hostkeyctl.conf"),
            "HostKeyAlgorithms ssh-ed25519\n",
        )
        .unwrap();
        std::fs::write(etc.join("sshd_config.d/10-site.conf"), "PermitRootLogin no\n").unwrap();
        std::fs::write(etc.join("sshd_config.d/.hidden.conf"), "PermitRootLogin yes\n").unwrap();
        std::fs::write(etc.join("my dir/admins extra"), "X11Forwarding no\n").unwrap();
        let copies = copy_config(&etc.join("sshd_config")).unwrap();
        let names: Vec<&str> = copies.iter().map(|(n, ..)| n.as_str()).collect();
        assert_eq!(names, ["00.conf", "01.conf", "02.conf", "03.conf"]);
        let main = &copies[0].1;
        assert!(main.contains("/01.conf\" \""), "{main}");
        for own in ["Port 22\n", "ListenAddress", "HostKey "] {
            assert!(
                main.contains(&format!("# (the cluster listener sets its own) {own}")),
                "{main}"
            );
        }
        assert!(main.contains("\nPasswordAuthentication no\n"), "{main}");
        // The include inside the Match stays inside it, its path quoted.
        let at = main.find("Match Group admins").unwrap();
        assert!(main[at..].contains("/03.conf\"\n    AllowTcpForwarding no"), "{main}");
        assert!(
            copies[1]
                .1
                .starts_with("# (the cluster listener sets its own) HostKeyAlgorithms")
        );
        assert_eq!(copies[2].1, "PermitRootLogin no\n");
        assert_eq!(copies[3].1, "X11Forwarding no\n");
    }

    #[test]
    fn an_include_it_cannot_follow_as_sshd_does_is_refused_never_skipped() {
        assert_eq!(split_args("a \"b c\"  d").unwrap(), ["a", "b c", "d"]);
        for bad in ["'a b'", "a\\ b", "\"a", "\"a\"b", "a\"b", "a\t# b", "a=b", "a\u{a0}b"] {
            assert!(split_args(bad).is_err(), "{bad}");
        }
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("d1")).unwrap();
        std::fs::write(
            dir.path().join("d1/x.conf"),
            "Match User a\n    ForceCommand /bin/false\n",
        )
        .unwrap();
        for (include, said) in [
            ("D/*/x.conf", "a wildcard in a directory"),
            ("D/d1/{x,y}.conf", "a brace"),
            ("D/d1/[xy].conf", "a bracket"),
            ("'D/d1/x.conf'", "a single quote"),
            ("d1/x.conf", "a relative path, which sshd reads from /etc/ssh"),
        ] {
            let include = include.replace('D', &dir.path().display().to_string());
            std::fs::write(dir.path().join("sshd_config"), format!("Include {include}\n")).unwrap();
            let refused = copy_config(&dir.path().join("sshd_config")).unwrap_err().to_string();
            assert!(refused.contains(said), "{include}: {refused}");
        }
        let quoted = format!("Include \"{}/d1/*.conf\"\n", dir.path().display());
        std::fs::write(dir.path().join("sshd_config"), quoted).unwrap();
        let copies = copy_config(&dir.path().join("sshd_config")).unwrap();
        assert_eq!(copies[1].1, "Match User a\n    ForceCommand /bin/false\n");
    }

    #[test]
    fn a_setting_of_the_main_sshd_the_listener_lacks_is_named() {
        let main = "port 22\npasswordauthentication no\nhostkey /a\nmaxsessions 10\n";
        assert!(
            super::same_otherwise(
                main,
                "port 2222\nhostkey /b\npasswordauthentication no\nmaxsessions 10\n"
            )
            .is_ok()
        );
        let weaker =
            super::same_otherwise(main, "port 2222\npasswordauthentication yes\nmaxsessions 10\n").unwrap_err();
        assert!(weaker.contains("its passwordauthentication would differ"), "{weaker}");
    }
}
