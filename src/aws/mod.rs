//! The AWS room: every call hostkeyctl makes to AWS, and nothing else.
//!
//! Each submodule adapts one service to a trait the library owns
//! (`store::Store`, `discovery::Fleet`, `dispatch::Dispatcher`,
//! `audit::metrics::MetricsSink`, ...), so the flows above never see an
//! SDK type, and the in-memory doubles in `src/testing` stand in for the
//! same traits. Service error codes (`ResourceNotFoundException`,
//! `AccessDenied`, ...) are matched here and only here; the flows get
//! [`AwsError`] and the adapters' own errors.
//!
//! This module itself holds what every adapter shares: one SDK
//! configuration from the common options, and errors that keep apart "the
//! service said no" (access denied, not found, throttled, KMS) from "we
//! could not reach it".

#[cfg(feature = "admin")]
pub mod autoscaling;
#[cfg(feature = "admin")]
pub mod cloudwatch;
mod config;
#[cfg(feature = "admin")]
pub mod dynamodb;
#[cfg(feature = "admin")]
pub mod ec2;
#[cfg(feature = "admin")]
pub mod ec2_members;
#[cfg(feature = "admin")]
pub mod elb;
pub mod enrol_signer;
pub mod imds;
#[cfg(feature = "admin")]
pub mod kms;
#[cfg(feature = "admin")]
pub mod lambda;
#[cfg(feature = "hyperpod")]
pub mod sagemaker;
pub mod secretsmanager;
pub mod ssm;

pub use config::*;
#[cfg(feature = "admin")]
pub use ec2::AwsFleet;
pub use secretsmanager::SecretsManagerStore;

pub use crate::aws_error::{AwsError, Call};
pub use crate::aws_options::{AWS, AwsArgs};
