//! The bed tier: the real `hostkeyctl` against real sshd nodes (OpenSSH
//! 8.4, 9.2, 10.0 profiles), HAProxy and the AWS emulator with IAM enforced
//! (feature `testbed`; `make deps` installs the parts). The bed itself is
//! `testbed/bed.py`; [`crate::common::bed`] drives it.

mod admin;
pub(crate) mod admission;
pub(crate) mod admission_asg;
mod admission_hyperpod;
mod admission_strangers;
mod association;
mod audit;
mod audit_metrics;
mod bootstrap;
mod certificates;
mod certificates_audit;
mod clients;
mod deliver;
mod doctor;
pub(crate) mod enrolment;
mod enrolment_asg;
pub(crate) mod enrolment_cluster;
mod enrolment_flood;
mod enrolment_forgeries;
mod enrolment_login;
pub(crate) mod enrolment_pcluster;
mod enrolment_step;
mod iam;
mod imds_guard;
mod install;
mod install_rollback;
mod kms_ca;
mod lifecycle;
pub(crate) mod load_balancer;
mod profiles;
mod profiles_certificates;
mod quickstart;
mod quickstart_page;
mod releases;
pub(crate) mod rotate;
mod rotate_resume;
mod scheduled;
mod scheduled_admission;
pub(crate) mod ssm_document;
mod store;
mod targeting;
mod targets;
mod testbed;
mod unit_sandbox;
mod warnings;
