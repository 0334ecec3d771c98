//! In-memory doubles of the outside systems, for testing the flows without
//! AWS, sshd or a network (cargo feature `testing`, as mountpoint-s3 ships
//! its mock client):
//!
//! - [`MemoryStore`]: a secret store with Secrets Manager's stage rules;
//! - [`Hooked`]: wraps a store and asks a hook about every call, which lets
//!   it pass, refuses it, lets it take effect and then stops dead like a
//!   crash, or holds it at a barrier (faults at the Nth call, assertions at
//!   a stage move, races);
//! - [`MemFleet`]: login nodes as temporary directories, each with an sshd
//!   double ([`MemNode`], an [`crate::install::sshd::SshdControl`]) whose
//!   served keys change only on reload; the fleet answers handshakes
//!   ([`crate::scan::Prober`]) and runs `hostkeyctl install` command lines
//!   in-process ([`MemDispatcher`], a [`crate::dispatch::Dispatcher`]);
//! - [`MemTargetGroups`], [`MemHooks`]: a target group (an id and a port
//!   per target, as ELB, in any target state) and a launch hook, for
//!   admission's flow and `doctor`'s balancer checks;
//! - [`MemAssociations`], [`MemManagedInstances`], [`MemInvocations`],
//!   [`MemMetrics`]: State Manager, SSM's registrations, Run Command's
//!   invocations as polling reads them, CloudWatch's metrics;
//! - [`MemCluster`], [`MemBindings`], [`MemSetKeys`], [`MemImds`],
//!   [`MemSigner`], [`MemKms`]: enrolment's cluster record, bindings
//!   table, set tags, a node's IMDS, the signer in process and KMS as a CA.
//!
//! Every double has [`Faults`] ("fail the Nth call" of any of its
//! operations, named by IAM action; `scripts/check_house.py` fails on an
//! outside-system trait without a double that plans faults), beside
//! [`Hooked`]'s richer faults for the store and [`NodeFaults`] for sshd.
//!
//! The real adapters are what the test bed runs; these never replace it.

mod dispatcher;
mod enrolment;
mod faults;
mod fleet;
mod functions;
mod hooked;
mod memory_store;
mod penalty;
mod sshd_config;
mod ssm;
mod target_groups;

pub use dispatcher::{MemDispatcher, install_args};
pub use enrolment::{MEM_KMS_KEY, MemBindings, MemCluster, MemImds, MemKms, MemSetKeys, MemSigner};
pub use faults::{Faults, Injected};
pub use fleet::{MEM_BANNER, MEM_LB_ADDRESS, MEM_LB_NAME, MemFleet, MemNode, NodeFaults};
pub use functions::MemFunctions;
pub use hooked::{Action, Call, Fault, Hooked, Op, fault_at};
pub use memory_store::MemoryStore;
pub use penalty::Penalty;
pub use ssm::{MemAssociations, MemCommand, MemInvocations, MemManagedInstances, MemMetrics};
pub use target_groups::{MemHooks, MemTargetGroups};
