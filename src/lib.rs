//! hostkeyctl: one SSH host identity for every login node behind a load
//! balancer.
//!
//! The data path: an admin stores one key set in Secrets Manager
//! ([`store`], as a [`document`] of a [`keyset`]); [`rollout`] sends
//! `hostkeyctl install` to the nodes through SSM Run Command ([`dispatch`],
//! through hostkeyctl's own [`ssm_document`], trusted by its hash), on
//! command lines built from typed values ([`shell`], [`ids`],
//! [`fingerprint`]); on each node [`install`] fetches the set, writes it,
//! reloads sshd, verifies by handshake and rolls back on failure, and
//! answers with a typed report; [`rotation`] replaces the set step by step
//! with the secret's stages as its only state; [`certificate`] signs host
//! certificates on it; [`audit`] checks by real handshakes ([`scan`]) what
//! every node ([`discovery`], [`hostport`]) and the load balancer serve.
//!
//! Every module:
//!
//! - [`keyset`], [`document`] (the key set's and the CA's documents),
//!   [`fingerprint`], [`ids`], [`hostport`]: the values, parsed strictly
//!   where they enter;
//! - [`store`] (Secrets Manager), [`dispatch`] (SSM), [`scan`] (SSH),
//!   [`discovery`] (EC2, load balancers, HyperPod), [`ssm_document`]
//!   (hostkeyctl's documents and what SSM holds of them), [`aws`] (SDK
//!   configuration, errors; [`aws_options`] the options that reach it;
//!   [`aws_error`] the calls' failures, which the
//!   library's traits answer with): the outside systems, each behind a trait
//!   (`SecretStore`, `Dispatcher`, `Prober`, `Fleet`, `TargetGroups`,
//!   `SshdControl`) where
//!   the flows need a seam;
//! - the flows, each a library module over those traits that the commands
//!   only call: [`rollout`] (push: waves, canary, the document),
//!   [`rotation`] (create, set, test, finish, abort as steps),
//!   [`association`] (a State Manager association that converges push
//!   fleets and new instances), [`audit`]
//!   (expected set, scan, verdicts), [`admission`] (which nodes the load
//!   balancer may send users to: admit, hold, drain, within limits),
//!   [`certificate`] and [`signing`] (sign: certificates on the set),
//!   [`ca_init`] (a CA secret, its key adopted, generated or in KMS),
//!   [`enrolment`] (a cluster's nodes trusting each other: each node's
//!   own keys certified by a CA in KMS), [`doctor`] (what is missing for
//!   a command to work), [`sessions`] (the HyperPod lifecycle step on
//!   running nodes), [`notice`] (what to tell users in each phase),
//!   [`install`] (plan, apply/roll back, verify, check), [`status`]
//!   (versions, phase, convergence), [`known_hosts`] (what clients trust:
//!   known_hosts lines, SSHFP, `@cert-authority`, the ssh_config block, and
//!   what Paramiko, Dropbear, AsyncSSH and PuTTY need),
//!   [`revocation`] (the keys a rotation retired: `@revoked` lines, a KRL);
//! - [`shell`], [`fsutil`], [`process`], [`escape`]: quoting for node
//!   shells, crash-safe writes, no core dumps, making outside text safe to
//!   print; [`imds_guard`]: the metadata service kept to root on a node;
//!   [`schedule_expr`]: the schedule expressions a command takes;
//! - [`cli`], [`commands`], [`output`], [`exit`]: the command line, printing
//!   and exit codes (only `commands` maps outcomes to exit codes; a command
//!   imports no other command, only `commands::common`);
//! - `testing` (feature `testing`, on for every `cargo test`): in-memory
//!   doubles of the outside systems, and [`testing::Hooked`], the one store
//!   wrapper that faults, watches or races any call.

#[cfg(feature = "admin")]
pub mod admission;
#[cfg(feature = "admin")]
pub mod association;
#[cfg(feature = "admin")]
pub mod audit;
pub mod aws;
pub mod aws_error;
pub mod aws_options;
#[cfg(feature = "admin")]
pub mod ca_init;
pub mod certificate;
pub mod cli;
pub mod commands;
#[cfg(feature = "admin")]
pub mod discovery;
#[cfg(feature = "admin")]
pub mod dispatch;
#[cfg(feature = "admin")]
pub mod doctor;
pub mod document;
pub mod enrolment;
pub mod escape;
pub mod exit;
pub mod fingerprint;
pub mod fsutil;
pub mod hostport;
pub mod ids;
pub mod imds_guard;
pub mod install;
pub mod keyset;
#[cfg(feature = "admin")]
pub mod known_hosts;
#[cfg(feature = "admin")]
pub mod notice;
pub mod output;
#[cfg(test)]
mod parser_properties;
pub mod process;
#[cfg(feature = "admin")]
pub mod revocation;
#[cfg(feature = "admin")]
pub mod rollout;
#[cfg(feature = "admin")]
pub mod rotation;
pub mod scan;
pub mod schedule_expr;
#[cfg(feature = "admin")]
pub mod sessions;
pub mod shell;
#[cfg(feature = "admin")]
pub mod signing;
#[cfg(feature = "admin")]
pub mod ssm_document;
#[cfg(feature = "admin")]
pub mod status;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
