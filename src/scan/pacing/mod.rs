//! The connection budget for servers that penalize unauthenticated
//! connections: OpenSSH 9.8 and later, where PerSourcePenalties is on by
//! default. Each connection that ends unauthenticated (every handshake of a
//! scan) costs its source 1 s at the server; the server forgives 1 s per
//! second and refuses the source once more than 15 s is outstanding.
//!
//! A [`Ledger`] keeps what a source owes each such server at most
//! [`BURST`] connections (a third below that threshold, for the rest of
//! what the source does), and once that is spent lets one more through
//! per second ([`RATE`]). Through a load balancer, whose connections reach
//! K backends, each from the balancer's own addresses, K times both
//! (`docs/audit.md` gives the arithmetic).
//!
//! What a source owes is shared by every process on the host: the ledger
//! keeps one file per server in a private directory (`/run/hostkeyctl/pacing`
//! for root), read and booked under an exclusive lock, so an audit every
//! two seconds, a node's timer install and `status` add up as sshd adds
//! them up. [`Paced`] puts a ledger in front of any [`crate::scan::Prober`].

mod budget;
mod limits;
pub use budget::Budget;
pub use limits::*;
