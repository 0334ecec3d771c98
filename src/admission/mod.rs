//! Admission: the load balancer sends users only to nodes that serve the
//! fleet's identity. One flow over the store (the set's public
//! fingerprints, DescribeSecret only), the fleet (which nodes the cluster
//! has), the target groups (who is registered, and registering) and the
//! prober (what each node really serves, by handshake): [`Admission`].
//!
//! - [`group`]: the target group, its name and the ports that read and
//!   change it;
//! - [`run`]: the flow, from what is registered to the calls that change it;
//! - `observe`: who is where, and what each node serves;
//! - [`plan`]: the decision per node (admit, hold, drain, remove, keep)
//!   within the safety limits;
//! - [`text`]: the table an operator reads.

mod group;
mod observe;
pub mod plan;
mod run;
#[cfg(test)]
mod tests_plan;
mod text;

pub use group::{Balancers, Group, GroupSettings, GroupSpec, TargetGroups};
use observe::{serving_of, who_is_where};
pub use plan::{Decision, Limits, NodePlan, Observed, Serving, decide, deregistrations};
pub use run::*;
