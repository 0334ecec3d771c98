//! What a test asks of its bed: [`BedOptions`].

/// What to start.
#[derive(Clone, Debug)]
pub struct BedOptions {
    /// Number of sshd login nodes.
    pub nodes: usize,
    /// Extra running instances without sshd (tags `Role=login`, `Cluster=virtual`).
    pub virtual_instances: usize,
    /// Start sshd with `-r`, so only a reload changes the keys it serves.
    pub no_reexec: bool,
    /// Profile nodes to add (testbed/bed.py `PROFILES`).
    pub profiles: Vec<&'static str>,
    /// HyperPod worker nodes (no sshd) beside the login group.
    pub hyperpod_workers: usize,
    /// The sshd nodes' HyperPod instance groups, in order
    /// (`controller-machine=1,login-group=2,worker-group=3`); empty, all
    /// in `login-group`.
    pub hyperpod_groups: &'static str,
    /// SSM cannot reach the nodes (a pull-only fleet).
    pub no_ssm: bool,
    /// The last N login nodes boot, but are launched in EC2 (and reached
    /// by SSM) only by `TestBed::launch_node`: an Auto Scaling group's
    /// new instance.
    pub held: usize,
    /// Deploy hostkeyctl's SSM documents first (`ssm-document deploy`, as
    /// the admin), as the CloudFormation stack does in an account: the
    /// admin role may send no other document.
    pub documents: bool,
    /// The login nodes run this Debian suite's sshd (`bullseye`, `trixie`;
    /// scripts/build-releases.sh), in a chroot of its own.
    pub release: Option<&'static str>,
    /// The login nodes include RHEL 9's DEFAULT crypto policy, whose
    /// KexAlgorithms has no post-quantum exchange (`--crypto-policy`).
    pub crypto_policy: bool,
    /// Seconds between the balancer's health checks of each target (`1`; an
    /// NLB's are 5 to 300 s).
    pub lb_check_interval: &'static str,
    /// HAProxy's balance algorithm (`roundrobin`; `source` pins each
    /// client to one backend).
    pub lb_balance: &'static str,
    /// The login nodes carry only ParallelCluster's own tags
    /// (`parallelcluster:node-type=LoginNode`, `parallelcluster:cluster-name`),
    /// not `Role=login` and `Cluster`.
    pub parallelcluster_tags: bool,
    /// The nodes start without hostkeyctl, as an AMI does: SSM commands
    /// find only what something installed in the node's own
    /// `/usr/local/bin` (the quick starts: the binary arrives the way the
    /// page says).
    pub bare: bool,
}

impl BedOptions {
    /// `n` login nodes, and the rest as [`Default`] has it.
    pub fn nodes(n: usize) -> Self {
        BedOptions {
            nodes: n,
            ..BedOptions::default()
        }
    }

    /// The nodes start without hostkeyctl (the field `bare`).
    pub fn bare(self) -> Self {
        BedOptions { bare: true, ..self }
    }

    /// The last `n` nodes wait for `TestBed::launch_node`.
    pub fn held(self, n: usize) -> Self {
        BedOptions { held: n, ..self }
    }

    /// sshd runs with `-r` (the field `no_reexec`).
    pub fn no_reexec(self) -> Self {
        BedOptions {
            no_reexec: true,
            ..self
        }
    }

    /// SSM cannot reach the nodes.
    pub fn no_ssm(self) -> Self {
        BedOptions { no_ssm: true, ..self }
    }

    /// `n` running instances without sshd beside the nodes.
    pub fn virtual_instances(self, n: usize) -> Self {
        BedOptions {
            virtual_instances: n,
            ..self
        }
    }

    /// The nodes carry only ParallelCluster's own tags.
    pub fn parallelcluster_tags(self) -> Self {
        BedOptions {
            parallelcluster_tags: true,
            ..self
        }
    }

    /// hostkeyctl's SSM documents are not deployed first.
    pub fn without_documents(self) -> Self {
        BedOptions {
            documents: false,
            ..self
        }
    }

    /// Login nodes of three OpenSSH releases side by side: this host's
    /// 9.2, Debian 11's 8.4 and Debian 13's 10.0, behind a balancer that
    /// checks them as an NLB does (every 10 s: 10.0's PerSourcePenalties
    /// count each check).
    pub fn three_releases() -> Self {
        BedOptions {
            release: Some(",bullseye,trixie"),
            lb_check_interval: "10",
            ..BedOptions::default()
        }
    }
}

impl Default for BedOptions {
    fn default() -> Self {
        BedOptions {
            nodes: 3,
            virtual_instances: 0,
            no_reexec: false,
            profiles: Vec::new(),
            hyperpod_workers: 0,
            hyperpod_groups: "",
            no_ssm: false,
            held: 0,
            documents: true,
            release: None,
            crypto_policy: false,
            lb_check_interval: "1",
            lb_balance: "roundrobin",
            parallelcluster_tags: false,
            bare: false,
        }
    }
}
