//! Fleet discovery: which nodes a `--target` names.
//!
//! Sources: EC2 `DescribeInstances` (`tag:`, instance ids; running
//! instances only), a load balancer's or one target group's registered
//! targets ([`crate::aws::elb`]; `lb:`, `tg:`), and a SageMaker HyperPod cluster's
//! nodes ([`crate::aws::sagemaker`]; audit only: SSM does not reach them). Behind the
//! [`Fleet`] seam, so the flows run against an in-memory fleet too
//! (feature `testing`).

mod fleet;
pub mod scope;

pub use fleet::*;
