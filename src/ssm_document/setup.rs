//! hostkeyctl's setup document: puts the node build at
//! `/usr/local/bin/hostkeyctl` on a running node that has none (or an
//! older one), from the admin's S3 bucket, checked against the SHA-256
//! the document itself carries. No parameter: nothing a sender types can
//! change what a node runs.
//!
//! Its content depends on the builds it pins, so no stack ships it:
//! `ssm-document deploy-setup` writes it from the files the admin holds
//! (the hashes are computed, never typed), and `deliver` trusts the
//! deployed document only when its content is exactly what this binary
//! writes for the pins it reads back from it ([`NodeBuilds::from_content`]).
//!
//! SSM Agent runs it as three kinds of step (AWS Systems Manager User
//! Guide, "Command document plugin reference"): one `aws:downloadContent`
//! per pinned architecture (sourceType `S3`: the agent downloads with the
//! instance profile, so the node role needs `s3:GetObject` on the
//! objects; a relative `destinationPath` lands in the command's
//! `downloads` directory, the working directory of the next
//! `aws:runShellScript`), each with `onFailure: exit`, then one shell step
//! that checks the hash of the file in its final directory before it
//! replaces anything, runs it once (`--version`: a build this node cannot
//! run never replaces one it can), and prints one JSON line
//! (`hostkeyctl-setup/v1`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::json;

/// The setup document's default name.
pub const SETUP_NAME: &str = "hostkeyctl-Setup";
/// Where the build goes on a node: where the lifecycle step, the custom
/// action and cloud-init put it, and on the SSM agent's PATH.
pub const NODE_PATH: &str = "/usr/local/bin/hostkeyctl";
/// The schema of a node's answer.
pub const REPORT_SCHEMA: &str = "hostkeyctl-setup/v1";

/// A node architecture with a build.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// `uname -m` x86_64.
    #[serde(rename = "x86_64")]
    X86_64,
    /// `uname -m` aarch64 (Graviton).
    Aarch64,
}

impl Arch {
    /// Every architecture, in the order of the document's steps.
    pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

    /// As `uname -m` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64",
            Arch::Aarch64 => "aarch64",
        }
    }

    /// The release's file name of its node build.
    pub fn file_name(self) -> String {
        format!("hostkeyctl-{}", self.as_str())
    }

    /// ELF `e_machine` of a build for it.
    fn elf_machine(self) -> u16 {
        match self {
            Arch::X86_64 => 62,
            Arch::Aarch64 => 183,
        }
    }
}

/// An `s3://BUCKET/PREFIX` location of the node builds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct S3Location {
    /// The bucket.
    pub bucket: String,
    /// The key prefix, without slashes at either end; may be empty.
    pub prefix: String,
}

/// Why an S3 location is refused.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct S3LocationError(String);

impl std::str::FromStr for S3Location {
    type Err = S3LocationError;

    /// `s3://BUCKET[/PREFIX]`. The bucket follows S3's naming rules for
    /// new buckets (Amazon S3 User Guide, "Bucket naming rules": 3 to 63
    /// characters, lowercase letters, digits, dots and hyphens, starting
    /// and ending with a letter or digit); the prefix is kept to S3's
    /// "safe characters" (User Guide, "Naming Amazon S3 objects"), which
    /// need no escaping in a URL.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let rest = text.strip_prefix("s3://").ok_or_else(|| {
            S3LocationError(format!(
                "{} is not an s3:// location: give s3://BUCKET/PREFIX, where the node builds are",
                crate::escape::escape(text)
            ))
        })?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
            && bucket.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
            && bucket.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
        if !bucket_ok {
            return Err(S3LocationError(format!(
                "{} is not an S3 bucket name (3 to 63 lowercase letters, digits, dots or hyphens)",
                crate::escape::escape(bucket)
            )));
        }
        let prefix = prefix.trim_matches('/');
        let prefix_ok = prefix.len() <= 900
            && !prefix.contains("//")
            && prefix.split('/').all(|segment| segment != "." && segment != "..")
            && prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!-_.*()/".contains(&b));
        if !prefix_ok {
            return Err(S3LocationError(format!(
                "the prefix {} may hold only letters, digits and ! - _ . * ( ) / (S3's safe characters)",
                crate::escape::escape(prefix)
            )));
        }
        Ok(S3Location {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }
}

impl std::fmt::Display for S3Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.prefix.is_empty() {
            write!(f, "s3://{}", self.bucket)
        } else {
            write!(f, "s3://{}/{}", self.bucket, self.prefix)
        }
    }
}

impl S3Location {
    /// The object key of `arch`'s build.
    pub fn key(&self, arch: Arch) -> String {
        if self.prefix.is_empty() {
            arch.file_name()
        } else {
            format!("{}/{}", self.prefix, arch.file_name())
        }
    }

    /// `s3://BUCKET/KEY` of `arch`'s build.
    pub fn uri(&self, arch: Arch) -> String {
        format!("s3://{}/{}", self.bucket, self.key(arch))
    }

    /// The URL `aws:downloadContent` takes (path style, the agent finds
    /// the bucket's region itself).
    pub fn url(&self, arch: Arch) -> String {
        format!("https://s3.amazonaws.com/{}/{}", self.bucket, self.key(arch))
    }
}

/// The builds a setup document pins: where they are, and each
/// architecture's SHA-256 (lowercase hex).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeBuilds {
    /// Where the node builds are.
    pub location: S3Location,
    /// The SHA-256 of each build, by architecture; at least one.
    pub pins: BTreeMap<Arch, String>,
}

/// Why a directory's builds cannot be pinned.
#[derive(Debug, thiserror::Error)]
pub enum BuildsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A file is not a node build for its architecture.
    #[error(
        "{path} is not a Linux {arch} executable: give the directory holding the release's node builds (hostkeyctl-x86_64, hostkeyctl-aarch64), as downloaded, or as `make dist` writes them to dist/"
    )]
    NotABuild {
        /// The file.
        path: String,
        /// The architecture its name says.
        arch: &'static str,
    },
    /// No build at all.
    #[error(
        "{dir} holds neither hostkeyctl-x86_64 nor hostkeyctl-aarch64: give the directory holding the release's node builds"
    )]
    None {
        /// The directory.
        dir: String,
    },
}

impl NodeBuilds {
    /// The builds in `dir` (`hostkeyctl-x86_64`, `hostkeyctl-aarch64`;
    /// either may be missing, not both), each checked to be an ELF
    /// executable for its architecture, and hashed.
    pub fn from_dir(dir: &std::path::Path, location: S3Location) -> Result<NodeBuilds, BuildsError> {
        use sha2::Digest;
        let mut pins = BTreeMap::new();
        for arch in Arch::ALL {
            let path = dir.join(arch.file_name());
            let shown = crate::escape::escape(&path.display().to_string());
            let bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => return Err(BuildsError::Read { path: shown, source }),
            };
            // ELF magic, 64-bit, little-endian, executable or PIE, machine.
            let elf = bytes.len() > 20
                && bytes[..4] == *b"\x7fELF"
                && bytes[4] == 2
                && bytes[5] == 1
                && matches!(u16::from_le_bytes([bytes[16], bytes[17]]), 2 | 3)
                && u16::from_le_bytes([bytes[18], bytes[19]]) == arch.elf_machine();
            if !elf {
                return Err(BuildsError::NotABuild {
                    path: shown,
                    arch: arch.as_str(),
                });
            }
            pins.insert(arch, hex::encode(sha2::Sha256::digest(&bytes)));
        }
        if pins.is_empty() {
            return Err(BuildsError::None {
                dir: crate::escape::escape(&dir.display().to_string()),
            });
        }
        Ok(NodeBuilds { location, pins })
    }

    /// The document's content, byte-stable for the same pins.
    pub fn content(&self) -> String {
        let mut steps = Vec::new();
        for arch in self.pins.keys() {
            let source = json!({ "path": self.location.url(*arch) }).to_string();
            // onFailure is read from the step's inputs (amazon-ssm-agent,
            // runpluginutil: the plugin's Properties are its inputs).
            steps.push(json!({
                "action": "aws:downloadContent",
                "name": format!("download_{}", arch.as_str()),
                "inputs": {
                    "sourceType": "S3",
                    "sourceInfo": source,
                    "destinationPath": arch.file_name(),
                    "onFailure": "exit",
                },
            }));
        }
        let lines = self.install_script();
        steps.push(json!({
            "action": "aws:runShellScript",
            "name": "install",
            "inputs": {
                "timeoutSeconds": "900",
                "runCommand": lines,
            },
        }));
        let pinned: Vec<String> = self
            .pins
            .iter()
            .map(|(arch, sha)| format!("{} SHA-256 {sha}", arch.file_name()))
            .collect();
        let p = super::patterns();
        let doc = json!({
            "schemaVersion": "2.2",
            "description": format!(
                "hostkeyctl: put the node build at {NODE_PATH} from {} ({}), checked by its SHA-256 before it replaces anything; with SecretId, then install the keys the secret's stages say. Runs nothing else.",
                self.location,
                pinned.join(", ")
            ),
            "parameters": {
                "SecretId": {
                    "type": "String",
                    "description": "The secret whose keys to install after the build (its ARN); empty for the build alone.",
                    "default": "",
                    "allowedPattern": format!("^$|{}", p["SecretId"]),
                },
                "Region": {
                    "type": "String",
                    "description": "The region the secret is read in; empty for the node's own.",
                    "default": "",
                    "allowedPattern": p["Region"],
                },
                "MetadataService": {
                    "type": "String",
                    "description": "root-only: keep the instance metadata service (and so the node's role, which reads the key set) to root, now and at every boot (hostkeyctl imds-guard --at-boot); open: remove that guard, every user reaches the role.",
                    "default": IMDS_ROOT_ONLY,
                    "allowedValues": [IMDS_ROOT_ONLY, IMDS_OPEN],
                },
            },
            "mainSteps": steps,
        });
        let mut text = serde_json::to_string_pretty(&doc).unwrap_or_default();
        text.push('\n');
        text
    }

    /// The shell step's lines: pick the node's build, check it, install
    /// it, report, and with a secret install the keys.
    fn install_script(&self) -> Vec<String> {
        // POSIX sh: the agent runs the lines with sh (dash on Debian and
        // Ubuntu).
        let mut lines = vec![
            "set -eu".to_owned(),
            "machine=$(uname -m)".to_owned(),
            "case \"$machine\" in".to_owned(),
        ];
        for (arch, sha) in &self.pins {
            lines.push(format!("{a}) arch={a} want={sha} ;;", a = arch.as_str()));
        }
        lines.extend(
            [
                "*) echo \"hostkeyctl-setup: no hostkeyctl build is pinned for $machine: deploy the document again with that build (hostkeyctl ssm-document deploy-setup)\" >&2; exit 1 ;;",
                "esac",
                &format!("bin={NODE_PATH}"),
                "if [ -f \"$bin\" ] && [ \"$(sha256sum \"$bin\" | cut -c1-64)\" = \"$want\" ]; then",
                "  result=unchanged",
                "else",
                "  [ -f \"hostkeyctl-$arch\" ] || { echo \"hostkeyctl-setup: hostkeyctl-$arch was not downloaded\" >&2; exit 1; }",
                "  [ ! -d \"$bin\" ] || { echo \"hostkeyctl-setup: $bin is a directory: remove it, then deliver again\" >&2; exit 1; }",
                "  mkdir -p \"$(dirname \"$bin\")\"",
                // A name of its own beside the target: two runs at once
                // (deliver and the setup association) never mix their files.
                "  new=$(mktemp \"$bin.XXXXXX\")",
                "  trap 'rm -f \"$new\"' EXIT",
                "  cat \"hostkeyctl-$arch\" >\"$new\"",
                "  chmod 0755 \"$new\"",
                "  got=$(sha256sum \"$new\" | cut -c1-64)",
                "  if [ \"$got\" != \"$want\" ]; then",
                "    echo \"hostkeyctl-setup: hostkeyctl-$arch as downloaded has SHA-256 $got, the document pins $want: not installed; upload the builds the document was deployed from, or deploy it again from the ones there (hostkeyctl ssm-document deploy-setup)\" >&2",
                "    exit 1",
                "  fi",
                "  if ! ran=$(\"$new\" --version 2>&1); then",
                "    echo \"hostkeyctl-setup: the pinned build does not run on this node, which keeps what it had: $ran\" >&2",
                "    exit 1",
                "  fi",
                "  mv -fT \"$new\" \"$bin\"",
                "  trap - EXIT",
                "  result=installed",
                "fi",
                // What is there now, measured: another run may have
                // replaced it meanwhile.
                "got=$(sha256sum \"$bin\" | cut -c1-64)",
                "[ \"$got\" = \"$want\" ] || { echo \"hostkeyctl-setup: $bin changed while this ran (SHA-256 $got): run deliver again\" >&2; exit 1; }",
                "version=$(\"$bin\" --version 2>&1 | head -n 1 | tr -cd 'A-Za-z0-9 ._+-')",
                // The metadata service for root alone before any key comes,
                // and at every boot (the lifecycle step's default on login
                // nodes): the node's role reads the key set.
                "if [ '{{ MetadataService }}' = open ]; then",
                "  \"$bin\" imds-guard --open --at-boot >&2",
                "  imds=open",
                "else",
                "  \"$bin\" imds-guard --at-boot >&2 || { echo \"hostkeyctl-setup: the instance metadata service could not be kept to root (said above), so every login user could read the key set with the node's role: install iptables, or deliver with --imds open to accept that\" >&2; exit 1; }",
                "  imds=root_only",
                "fi",
                &format!(
                    "printf '{{\"schema\":\"{REPORT_SCHEMA}\",\"result\":\"%s\",\"path\":\"%s\",\"arch\":\"%s\",\"sha256\":\"%s\",\"version\":\"%s\",\"imds\":\"%s\"}}\\n' \"$result\" \"$bin\" \"$arch\" \"$got\" \"$version\" \"$imds\""
                ),
                // With a secret (the setup association): the keys too, as
                // the converge document installs them.
                "secret='{{ SecretId }}'; region='{{ Region }}'",
                "if [ -n \"$secret\" ]; then",
                "  set -- install --quiet --secret-id=\"$secret\"",
                "  if [ -n \"$region\" ]; then set -- \"$@\" --region=\"$region\"; fi",
                "  \"$bin\" \"$@\"",
                "fi",
            ]
            .map(str::to_owned),
        );
        lines
    }

    /// The pins of a deployed document, when its content is exactly what
    /// [`NodeBuilds::content`] writes for them; `None` for any other
    /// document.
    pub fn from_content(text: &str) -> Option<NodeBuilds> {
        let doc: serde_json::Value = serde_json::from_str(text).ok()?;
        let steps = doc["mainSteps"].as_array()?;
        let mut location: Option<S3Location> = None;
        let mut archs = Vec::new();
        for step in steps.iter().filter(|s| s["action"] == "aws:downloadContent") {
            let arch = Arch::ALL
                .into_iter()
                .find(|a| step["inputs"]["destinationPath"] == a.file_name().as_str())?;
            let info: serde_json::Value = serde_json::from_str(step["inputs"]["sourceInfo"].as_str()?).ok()?;
            let url = info["path"].as_str()?;
            let rest = url.strip_prefix("https://s3.amazonaws.com/")?;
            let at = rest.strip_suffix(&arch.file_name())?.trim_end_matches('/');
            location = Some(format!("s3://{at}").parse().ok()?);
            archs.push(arch);
        }
        let script = steps.last()?["inputs"]["runCommand"].as_array()?;
        let mut pins = BTreeMap::new();
        for arch in archs {
            let prefix = format!("{a}) arch={a} want=", a = arch.as_str());
            let sha = script
                .iter()
                .filter_map(|l| l.as_str()?.strip_prefix(&prefix)?.strip_suffix(" ;;"))
                .next()?;
            // A SHA-256, nothing else: the pin stands in a shell line.
            if !is_sha256_hex(sha) {
                return None;
            }
            pins.insert(arch, sha.to_owned());
        }
        let builds = NodeBuilds {
            location: location?,
            pins,
        };
        (builds.content() == text).then_some(builds)
    }
}

/// The setup document's `MetadataService`: guarded (the default).
pub const IMDS_ROOT_ONLY: &str = "root-only";
/// The setup document's `MetadataService`: open to every user.
pub const IMDS_OPEN: &str = "open";

/// The setup document's parameters for `imds` (`root-only` or `open`).
pub fn imds_parameter(imds: &str) -> (String, Vec<String>) {
    ("MetadataService".to_owned(), vec![imds.to_owned()])
}

/// 64 lowercase hexadecimal digits.
pub fn is_sha256_hex(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// What a node answered.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct SetupReport {
    /// `hostkeyctl-setup/v1`.
    pub schema: String,
    /// `installed` or `unchanged`.
    pub result: String,
    /// Where the build is.
    pub path: String,
    /// The node's architecture.
    pub arch: String,
    /// The build's SHA-256.
    pub sha256: String,
    /// What `hostkeyctl --version` printed there.
    pub version: String,
    /// Who reaches the metadata service now (none from a document before
    /// the guard).
    #[serde(default)]
    pub imds: Option<crate::imds_guard::Access>,
}

impl SetupReport {
    /// The report line in a node's output.
    pub fn from_output(stdout: &str) -> Option<SetupReport> {
        stdout
            .lines()
            .rev()
            .filter(|l| l.starts_with('{'))
            .find_map(|l| serde_json::from_str::<SetupReport>(l).ok())
            .filter(|r| r.schema == REPORT_SCHEMA)
    }
}
