//! Login nodes in memory: each a temporary directory with a real
//! `etc/ssh` layout and an sshd double that, like sshd, serves the keys it
//! loaded at its last reload, whatever is on disk since.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ssh_key::PublicKey;

use crate::discovery::{DiscoveryError, Fleet, Instance, TargetSpec};
use crate::install::sshd::{Effective, ReloadMethod, SshdControl, SshdError};
use crate::keyset::{HostKey, KeyAlgorithm, KeySet};
use crate::scan::{Prober, ScanAlgorithm, ScanError};

/// Faults a node can be given.
#[derive(Clone, Debug, Default)]
pub struct NodeFaults {
    /// sshd takes a `KexAlgorithms` line but offers none of its
    /// post-quantum exchanges (what a handshake after install checks).
    pub drops_post_quantum: bool,
    /// The reload command fails (sshd keeps what it had).
    pub reload_fails: bool,
    /// sshd exits on reload and stays down.
    pub dies_on_reload: bool,
    /// The SSM agent fails the command with this stderr before it runs.
    pub dispatch_fails: Option<String>,
    /// The install is killed when it reloads sshd (the double panics:
    /// files written, sshd not reloaded, nothing cleaned up).
    pub killed_at_reload: bool,
    /// sshd loads its keys on reload but serves none of its certificates.
    pub drops_certificates: bool,
    /// sshd's PerSourcePenalties refuses every connection (`Not allowed at
    /// this time`, before its banner) until the next reload clears it.
    pub penalized: bool,
    /// sshd serves this plain key for its type (a first `HostKey` line of
    /// another key), while the cert algorithm still gets the installed
    /// key's certificate.
    pub stray_plain_key: Option<(ScanAlgorithm, PublicKey)>,
}

/// The banner of an in-memory node's sshd: Debian 12's, which does not
/// penalize unauthenticated connections.
pub const MEM_BANNER: &str = "SSH-2.0-OpenSSH_9.2p1 Debian-2+deb12u7";

/// One login node.
pub struct MemNode {
    /// Its EC2 identity.
    pub instance: Instance,
    /// Its `/etc/ssh`.
    pub ssh_dir: PathBuf,
    /// Its root directory.
    pub root: PathBuf,
    pub(super) config: PathBuf,
    served: Mutex<Option<BTreeMap<ScanAlgorithm, PublicKey>>>,
    certificates: Mutex<BTreeMap<ScanAlgorithm, ssh_key::Certificate>>,
    /// Faults to inject.
    pub faults: Mutex<NodeFaults>,
    reloads: Mutex<usize>,
    /// Connections made to it (handshakes that reached it).
    connections: Mutex<usize>,
    /// The version banner its sshd sends (before any `VersionAddendum`).
    pub banner: Mutex<String>,
    /// The `VersionAddendum` sshd loaded at its last reload.
    addendum: Mutex<Option<String>>,
    /// PerSourcePenalties as OpenSSH 9.8 and later apply them by default,
    /// when set: per source ("direct", or "lb" through the load balancer).
    pub penalties: Mutex<Option<BTreeMap<&'static str, super::penalty::Penalty>>>,
    /// Connections it refused for a penalty (sshd's `drop connection ...
    /// penalty` lines).
    refused: Mutex<usize>,
    /// The key exchanges its KEXINIT lists, as loaded at its last reload.
    pub kex: Mutex<Vec<String>>,
    /// What sshd accepts and `sshd -V` says (9.2 by default; `None`:
    /// sshd cannot say).
    pub kex_support: Mutex<Option<crate::install::sshd::KexSupport>>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn scan_algorithm(key: &PublicKey) -> Option<ScanAlgorithm> {
    match key.algorithm().as_str() {
        "ssh-ed25519" => Some(ScanAlgorithm::Ed25519),
        "ecdsa-sha2-nistp256" => Some(ScanAlgorithm::EcdsaP256),
        "ecdsa-sha2-nistp384" => Some(ScanAlgorithm::EcdsaP384),
        "ecdsa-sha2-nistp521" => Some(ScanAlgorithm::EcdsaP521),
        "ssh-rsa" => Some(ScanAlgorithm::Rsa),
        _ => None,
    }
}

impl MemNode {
    /// The fingerprints sshd serves now, by key type (`None`: sshd is down).
    pub fn served(&self) -> Option<BTreeMap<ScanAlgorithm, crate::fingerprint::Fingerprint>> {
        lock(&self.served)
            .as_ref()
            .map(|m| m.iter().map(|(a, k)| (*a, crate::keyset::fingerprint_of(k))).collect())
    }

    /// The certificates sshd serves now, by key type.
    pub fn served_certificates(&self) -> BTreeMap<ScanAlgorithm, ssh_key::Certificate> {
        lock(&self.certificates).clone()
    }

    /// The certificates the config names whose key sshd serves, as sshd
    /// pairs them at start and on reload (a certificate with no matching
    /// key is skipped with an error in sshd's log).
    fn load_certificates(
        &self,
        served: &BTreeMap<ScanAlgorithm, PublicKey>,
    ) -> BTreeMap<ScanAlgorithm, ssh_key::Certificate> {
        let mut out = BTreeMap::new();
        let Ok(effective) = self.effective() else { return out };
        for path in &effective.host_certificates {
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            let Ok(cert) = ssh_key::Certificate::from_openssh(text.trim()) else {
                continue;
            };
            let key = PublicKey::from(cert.public_key().clone());
            if let Some(a) = scan_algorithm(&key)
                && served.get(&a).is_some_and(|k| k.key_data() == key.key_data())
            {
                out.insert(a, cert);
            }
        }
        out
    }

    /// How many times sshd was reloaded.
    pub fn reloads(&self) -> usize {
        *lock(&self.reloads)
    }

    /// How many connections reached it.
    pub fn connections(&self) -> usize {
        *lock(&self.connections)
    }

    /// Runs OpenSSH 10.0 with its default PerSourcePenalties.
    pub fn penalize(&self) {
        *lock(&self.banner) = "SSH-2.0-OpenSSH_10.0p2 Debian-7".to_owned();
        *lock(&self.penalties) = Some(BTreeMap::new());
    }

    /// How many connections it refused for a penalty.
    pub fn refused(&self) -> usize {
        *lock(&self.refused)
    }

    /// The key exchanges the config allows, as sshd loads them.
    fn load_kex(&self) {
        let list = self.effective().ok().and_then(|e| e.kex_algorithms).unwrap_or_default();
        let drops = lock(&self.faults).drops_post_quantum;
        *lock(&self.kex) = list
            .split(',')
            .filter(|k| !k.is_empty())
            .filter(|k| !drops || !crate::scan::warnings::is_post_quantum(k))
            .map(str::to_owned)
            .collect();
    }

    /// Stops sshd: every handshake is refused until the next reload.
    pub fn stop(&self) {
        *lock(&self.served) = None;
    }

    /// Whether sshd serves exactly `keys` (one key per type, nothing else).
    pub fn serves(&self, keys: &KeySet) -> bool {
        let want: BTreeMap<ScanAlgorithm, crate::fingerprint::Fingerprint> = keys
            .keys()
            .map(|k| (ScanAlgorithm::for_managed(k.algorithm()), k.fingerprint().clone()))
            .collect();
        self.served() == Some(want)
    }

    /// Whether the node has `keys` in place as a rotation's next set (the
    /// `hostkeyctl_next_*` files install writes, checks and reloads onto).
    pub fn offers(&self, keys: &KeySet) -> bool {
        keys.keys().all(|k| {
            let path = crate::install::next_private_path(&self.ssh_dir, k.algorithm());
            std::fs::read_to_string(path)
                .ok()
                .and_then(|text| HostKey::from_openssh(&zeroize::Zeroizing::new(text)).ok())
                .is_some_and(|on_disk| on_disk.fingerprint() == k.fingerprint())
        })
    }

    /// Loads what the config names, as sshd does at start and on reload:
    /// the first key of each type the HostKeyAlgorithms setting allows.
    fn load(&self) -> Result<BTreeMap<ScanAlgorithm, PublicKey>, SshdError> {
        let effective = self.effective()?;
        let allowed = |a: ScanAlgorithm| match &effective.host_key_algorithms {
            None => true,
            Some(list) => list.split(',').any(|name| match a {
                ScanAlgorithm::Rsa => matches!(name, "rsa-sha2-512" | "rsa-sha2-256" | "ssh-rsa"),
                other => name == other.key_type(),
            }),
        };
        let mut out = BTreeMap::new();
        for path in &effective.host_keys {
            let Ok(text) = std::fs::read_to_string(path) else {
                continue;
            };
            let text = zeroize::Zeroizing::new(text);
            // Types hostkeyctl does not manage (ECDSA P-384) load too.
            let public = match HostKey::from_openssh(&text) {
                Ok(key) => key.public_key().clone(),
                Err(_) => match ssh_key::PrivateKey::from_openssh(text.as_str()) {
                    Ok(key) => key.public_key().clone(),
                    Err(_) => {
                        return Err(SshdError::ConfigTest {
                            command: "sshd -t (double)".to_owned(),
                            stderr: format!("Unable to load host key {path}: invalid format"),
                        });
                    }
                },
            };
            if let Some(a) = scan_algorithm(&public)
                && allowed(a)
            {
                out.entry(a).or_insert(public);
            }
        }
        Ok(out)
    }
}

impl SshdControl for MemNode {
    fn config(&self) -> &Path {
        &self.config
    }

    fn test(&self) -> Result<(), SshdError> {
        self.load().map(|_| ())
    }

    fn effective(&self) -> Result<Effective, SshdError> {
        self.effective_of(&self.config)
    }

    fn effective_of(&self, config: &Path) -> Result<Effective, SshdError> {
        let mut e = Effective::default();
        super::sshd_config::parse_file(&self.ssh_dir, config, &mut e, 0);
        if e.host_keys.is_empty() {
            for a in KeyAlgorithm::ALL {
                e.host_keys
                    .push(self.ssh_dir.join(a.private_file_name()).display().to_string());
            }
        }
        if e.listen.is_empty() {
            e.listen.push("0.0.0.0:22".to_owned());
        }
        e.kex_algorithms
            .get_or_insert_with(|| super::sshd_config::OPENSSH_9_2_KEX.to_owned());
        Ok(e)
    }

    fn kex_support(&self) -> Option<crate::install::sshd::KexSupport> {
        lock(&self.kex_support).clone()
    }

    fn reload(&self, _method: &ReloadMethod) -> Result<String, SshdError> {
        let faults = lock(&self.faults).clone();
        assert!(!faults.killed_at_reload, "install killed at the reload (injected)");
        *lock(&self.reloads) += 1;
        if faults.reload_fails {
            return Err(SshdError::Reload {
                command: "reload (double)".to_owned(),
                status: "exit status: 1".to_owned(),
                stderr: "injected reload failure".to_owned(),
            });
        }
        if faults.dies_on_reload {
            *lock(&self.served) = None;
            return Ok("reload (double): sshd exited".to_owned());
        }
        let loaded = self.load()?;
        // SIGHUP clears sshd's penalty table.
        lock(&self.faults).penalized = false;
        if let Some(table) = lock(&self.penalties).as_mut() {
            table.clear();
        }
        let certificates = if faults.drops_certificates {
            BTreeMap::new()
        } else {
            self.load_certificates(&loaded)
        };
        *lock(&self.served) = Some(loaded);
        *lock(&self.certificates) = certificates;
        self.load_kex();
        *lock(&self.addendum) = self
            .effective()
            .ok()
            .and_then(|e| e.version_addendum)
            .filter(|a| a != "none");
        Ok("reload (double)".to_owned())
    }
}

/// A fleet of in-memory login nodes.
pub struct MemFleet {
    /// The nodes.
    pub nodes: Vec<MemNode>,
    /// Load balancer probes answered so far (each goes to the next node).
    lb_probes: std::sync::atomic::AtomicUsize,
    /// Every Nth load balancer probe gets no answer (0: none), as when a
    /// backend is overloaded or a flow is reset.
    pub lb_drops_every: std::sync::atomic::AtomicUsize,
    /// Faults (`ec2:DescribeInstances`, and
    /// `elasticloadbalancing:DescribeTargetHealth` for the load balancer's
    /// targets).
    pub faults: super::faults::Faults,
    _dir: tempfile::TempDir,
}

/// The in-memory load balancer's name (`lb:mem-login`) and address.
pub const MEM_LB_NAME: &str = "mem-login";
/// Where the in-memory load balancer listens: port 22 of this address.
pub const MEM_LB_ADDRESS: &str = "127.200.0.10";

impl MemFleet {
    /// `count` nodes, each with its own fresh keys of `algorithms` (so they
    /// differ, as on a real fleet), a Debian-like config with an `Include`
    /// of `sshd_config.d/*.conf`, and sshd serving those keys.
    pub fn new(count: usize, algorithms: &[KeyAlgorithm]) -> std::io::Result<Self> {
        let dir = tempfile::Builder::new().prefix("hostkeyctl-memfleet-").tempdir()?;
        let mut nodes = Vec::new();
        for i in 0..count {
            let root = dir.path().join(format!("node-{}", i + 1));
            let ssh_dir = root.join("etc/ssh");
            std::fs::create_dir_all(ssh_dir.join("sshd_config.d"))?;
            for sub in ["run", "var/lib/hostkeyctl"] {
                std::fs::create_dir_all(root.join(sub))?;
            }
            let keys = KeySet::generate(algorithms, 2048).map_err(std::io::Error::other)?;
            keys.write_dir(&ssh_dir, false).map_err(std::io::Error::other)?;
            let address = format!("127.200.0.{}", 11 + i);
            let config = ssh_dir.join("sshd_config");
            std::fs::write(
                &config,
                format!(
                    "# in-memory node {}\nInclude {}/sshd_config.d/*.conf\nListenAddress {address}:22\nPasswordAuthentication no\n",
                    i + 1,
                    ssh_dir.display()
                ),
            )?;
            let node = MemNode {
                instance: Instance {
                    instance_id: format!("i-{:017x}", i + 1),
                    private_ip: Some(address),
                    name: Some(format!("mem-login-{}", i + 1)),
                    clusters: Vec::new(),
                },
                ssh_dir,
                root,
                config,
                served: Mutex::new(None),
                certificates: Mutex::new(BTreeMap::new()),
                faults: Mutex::new(NodeFaults::default()),
                reloads: Mutex::new(0),
                connections: Mutex::new(0),
                banner: Mutex::new(MEM_BANNER.to_owned()),
                addendum: Mutex::new(None),
                penalties: Mutex::new(None),
                refused: Mutex::new(0),
                kex: Mutex::new(Vec::new()),
                kex_support: Mutex::new(Some(crate::install::sshd::KexSupport {
                    supported: super::sshd_config::OPENSSH_9_2_KEX
                        .split(',')
                        .map(str::to_owned)
                        .collect(),
                    release: "OpenSSH_9.2p1 Debian-2+deb12u7, OpenSSL 3.0.15".to_owned(),
                })),
            };
            node.load_kex();
            let loaded = node.load().map_err(std::io::Error::other)?;
            *lock(&node.served) = Some(loaded);
            nodes.push(node);
        }
        Ok(MemFleet {
            nodes,
            lb_probes: std::sync::atomic::AtomicUsize::new(0),
            lb_drops_every: std::sync::atomic::AtomicUsize::new(0),
            faults: super::faults::Faults::new(),
            _dir: dir,
        })
    }

    /// The instances, as discovery would return them.
    pub fn instances(&self) -> Vec<Instance> {
        self.nodes.iter().map(|n| n.instance.clone()).collect()
    }

    /// The node with this instance id.
    pub fn node(&self, instance_id: &str) -> Option<&MemNode> {
        self.nodes.iter().find(|n| n.instance.instance_id == instance_id)
    }

    /// Every node serves exactly `keys`.
    pub fn all_serve(&self, keys: &KeySet) -> bool {
        self.nodes.iter().all(|n| n.serves(keys))
    }

    /// Every node has `keys` in place as the next set.
    pub fn all_offer(&self, keys: &KeySet) -> bool {
        self.nodes.iter().all(|n| n.offers(keys))
    }
}

impl Fleet for MemFleet {
    /// Every node is tagged `Role=login` and a target of `lb:mem-login`;
    /// instance ids select nodes; other node sources (tg:, hyperpod:)
    /// match nothing.
    async fn discover(&self, specs: &[TargetSpec]) -> Result<Vec<Instance>, DiscoveryError> {
        if specs.is_empty() {
            return Err(DiscoveryError::NoTargets);
        }
        self.faults.enter("ec2:DescribeInstances")?;
        let found: Vec<Instance> = self
            .nodes
            .iter()
            .filter(|n| {
                specs.iter().all(|s| match s {
                    TargetSpec::Tag { key, value } => key == "Role" && value == "login",
                    TargetSpec::InstanceId(id) => *id == n.instance.instance_id,
                    // The one load balancer has every node as a target.
                    TargetSpec::LoadBalancer(name) => name == MEM_LB_NAME,
                    // Target groups and clusters are not modelled here.
                    _ => false,
                })
            })
            .map(|n| n.instance.clone())
            .collect();
        if found.is_empty() {
            return Err(DiscoveryError::NoMatch(crate::discovery::describe_specs(specs)));
        }
        Ok(found)
    }

    /// One network load balancer, `mem-login` at [`MEM_LB_ADDRESS`], with
    /// every node as a healthy instance target.
    async fn load_balancer(
        &self,
        name_or_arn: &str,
    ) -> Result<(crate::discovery::Listener, Vec<crate::discovery::GroupTarget>), DiscoveryError> {
        self.faults.enter("elasticloadbalancing:DescribeTargetHealth")?;
        if name_or_arn != MEM_LB_NAME {
            return Err(DiscoveryError::NoMatch(format!("lb:{name_or_arn}")));
        }
        let listener = crate::discovery::Listener {
            name: MEM_LB_NAME.to_owned(),
            dns_name: MEM_LB_ADDRESS.to_owned(),
            port: 22,
            target_groups: vec!["mem-login-targets".to_owned()],
        };
        let targets = self
            .nodes
            .iter()
            .map(|n| crate::discovery::GroupTarget {
                id: n.instance.instance_id.clone(),
                is_instance: true,
                port: Some(22),
                health: crate::discovery::Health {
                    source: "target group mem-login-targets".to_owned(),
                    state: "healthy".to_owned(),
                    reason: None,
                },
            })
            .collect();
        Ok((listener, targets))
    }
}

impl MemFleet {
    /// The node a probe of `host` reaches: that node, or, through the load
    /// balancer, the next node in turn (`None`: no answer).
    fn reached(&self, host: &str, port: u16) -> Result<(&MemNode, &'static str), ScanError> {
        use std::sync::atomic::Ordering;
        if port != 22 {
            return Err(ScanError::Refused);
        }
        if host == MEM_LB_ADDRESS {
            let n = self.lb_probes.fetch_add(1, Ordering::SeqCst);
            let every = self.lb_drops_every.load(Ordering::SeqCst);
            if every > 0 && (n + 1).is_multiple_of(every) {
                return Err(ScanError::Refused);
            }
            return self
                .nodes
                .get(n % self.nodes.len().max(1))
                .map(|node| (node, "lb"))
                .ok_or(ScanError::Refused);
        }
        self.nodes
            .iter()
            .find(|n| n.instance.private_ip.as_deref() == Some(host))
            .map(|node| (node, "direct"))
            .ok_or(ScanError::Refused)
    }
}

impl Prober for MemFleet {
    async fn handshake(&self, to: crate::scan::Handshake<'_>) -> crate::scan::Answer {
        use crate::scan::{Answer, Served};
        let (algorithm, certificates) = (to.algorithm, to.certificates);
        let (node, source) = match self.reached(to.host, to.port) {
            Ok(reached) => reached,
            Err(e) => return Answer::unreached(e),
        };
        let Some(keys) = lock(&node.served).clone() else {
            return Answer::unreached(ScanError::Refused);
        };
        *lock(&node.connections) += 1;
        let now = tokio::time::Instant::now();
        let admitted = lock(&node.penalties).as_mut().is_none_or(|p| {
            p.entry(source)
                .or_insert_with(|| super::penalty::Penalty::new(now))
                .admit(now)
        });
        if !admitted {
            *lock(&node.refused) += 1;
        }
        if lock(&node.faults).penalized || !admitted {
            return Answer {
                served: Err(ScanError::Penalized(crate::scan::hello::PENALTY_REFUSAL.to_owned())),
                hello: None,
                connected: true,
            };
        }
        let certs = lock(&node.certificates).clone();
        // sshd's KEXINIT: a certificate algorithm for each certified type,
        // then the plain ones, only for the types it holds.
        let mut offered: Vec<String> = certs
            .keys()
            .flat_map(|a| offered_names(*a))
            .map(|n| format!("{n}-cert-v01@openssh.com"))
            .collect();
        offered.extend(keys.keys().flat_map(|a| offered_names(*a)).map(|n| (*n).to_owned()));
        let banner = match lock(&node.addendum).as_deref() {
            Some(addendum) => format!("{} {addendum}", lock(&node.banner)),
            None => lock(&node.banner).clone(),
        };
        let hello = crate::scan::Hello {
            banner,
            host_key_algorithms: offered,
            kex_algorithms: lock(&node.kex).clone(),
        };
        let stray = lock(&node.faults)
            .stray_plain_key
            .clone()
            .filter(|(a, _)| *a == algorithm)
            .map(|(_, key)| key);
        let served = match (keys.get(&algorithm), certs.get(&algorithm)) {
            (None, _) => Err(ScanError::NotOffered(algorithm.key_type().to_owned())),
            (Some(_), Some(cert)) if certificates => Ok(Served::Certificate(Box::new(cert.clone()))),
            (Some(key), _) => Ok(Served::Key(stray.unwrap_or_else(|| key.clone()))),
        };
        Answer {
            served,
            hello: Some(hello),
            connected: true,
        }
    }
}

/// The host key algorithm names sshd lists for a key type.
fn offered_names(algorithm: ScanAlgorithm) -> &'static [&'static str] {
    match algorithm {
        ScanAlgorithm::Ed25519 => &["ssh-ed25519"],
        ScanAlgorithm::EcdsaP256 => &["ecdsa-sha2-nistp256"],
        ScanAlgorithm::EcdsaP384 => &["ecdsa-sha2-nistp384"],
        ScanAlgorithm::EcdsaP521 => &["ecdsa-sha2-nistp521"],
        ScanAlgorithm::Rsa => &["rsa-sha2-512", "rsa-sha2-256"],
    }
}
