//! The audit: what clients really see, node by node and through the load
//! balancer, compared with the expected key set, as a flow over the store,
//! the fleet, the prober and the dispatcher ([`Audit`]), like
//! [`crate::rotation::Rotation`]:
//!
//! - [`flow`]: the flow, from the expected set to the report;
//! - [`expected`]: where the expected set comes from (the secret's tags or
//!   value, a known_hosts file, fingerprints);
//! - [`crate::scan`]: the handshakes, within limits
//!   ([`crate::scan::ScanPolicy::default`] is what the audit, a rotation's
//!   checks and `status` use);
//! - [`judge`]: the verdicts;
//! - [`report`]: the report and its conclusion (drift, incomplete,
//!   consistent), which `commands::audit` maps to an exit code.

pub mod expected;
pub mod judge;
pub mod messages;
pub mod metrics;
pub mod report;
mod text;

pub use expected::{ExpectedSource, expected_from_known_hosts_text};
pub use judge::{
    Expected, Finding, LbReport, LbType, NodeReport, Seen, Verdict, judge_certificates, judge_lb,
    judge_lb_certificates, judge_node, miss_probability, no_address, with_plain_keys,
};
mod flow;

pub use flow::*;
pub use report::{AuditReport, Conclusion, MemberFinding, Membership, OnDisk};
