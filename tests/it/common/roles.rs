//! Who signs a call on the bed, and which role docs/iam.md names for each
//! command (checked against docs/iam.md's table by policies.rs).

/// Who signs a call: one IAM user per policy of `iam/` (docs/iam.md), and
/// the bed's own all-powerful user for what a test sets up, reads or
/// tampers with on purpose. The emulator enforces the policies
/// (testbed/emulator/iam.py).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// `iam/admin.json`.
    Admin,
    /// `iam/rotation.json`.
    Rotation,
    /// `iam/node.json`.
    Node,
    /// `iam/auditor.json`.
    Auditor,
    /// `iam/signer.json`.
    Signer,
    /// `iam/rotation-lambda.json`: the scheduled rotation's function.
    RotationLambda,
    /// `iam/admission.json`: `admit`.
    Admission,
    /// `iam/enrolment.json`: the enrolment signer function.
    Enrolment,
    /// `iam/cluster-node.json`: `enroll` on controller and compute nodes.
    ClusterNode,
    /// The bed itself (never a role under test).
    BedRoot,
}

impl Role {
    /// The key of its credentials in `bed.json`.
    pub fn key(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Rotation => "rotation",
            Role::Node => "node",
            Role::Auditor => "auditor",
            Role::Signer => "signer",
            Role::RotationLambda => "rotation-lambda",
            Role::Admission => "admission",
            Role::Enrolment => "enrolment",
            Role::ClusterNode => "cluster-node",
            Role::BedRoot => "bed-root",
        }
    }

    /// The role docs/iam.md names for a hostkeyctl command line: `rotate`
    /// and `schedule` the rotation role, the rotation function its own, `audit` the auditor, `admit` admission, `sign` and `known-hosts
    /// --ca-secret-id` the signer, `install` a node, the rest the admin.
    pub fn for_command(args: &[&str]) -> Role {
        let Some(command) = args.iter().find(|a| !a.starts_with('-')) else {
            return Role::Admin;
        };
        match *command {
            "rotate" | "schedule" => Role::Rotation,
            // The Lambda function's own name for the binary.
            "bootstrap" => Role::RotationLambda,
            "audit" => Role::Auditor,
            "admit" => Role::Admission,
            "install" => Role::Node,
            "enroll" => Role::ClusterNode,
            // `enrolment list|revoke` is the admin's; the signer's own name
            // for the binary (HOSTKEYCTL_FUNCTION=enrolment) is the role's.
            "enrolment" if args.iter().any(|a| *a == "list" || *a == "revoke") => Role::Admin,
            "enrolment" => Role::Enrolment,
            "sign" => Role::Signer,
            "known-hosts" if args.iter().any(|a| a.starts_with("--ca-secret-id")) => Role::Signer,
            _ => Role::Admin,
        }
    }
}
