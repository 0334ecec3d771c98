//! `hostkeyctl keygen`: generate a key set offline and write it as files.

use anyhow::Context;
use serde::Serialize;

use crate::cli::KeygenArgs;
use crate::exit::{Failure, Status};
use crate::keyset::{KeyAlgorithm, KeySet, MAX_RSA_BITS, MIN_RSA_BITS, WrittenKey};
use crate::output::{self, OutputFormat};

#[derive(Serialize)]
struct KeygenReport<'a> {
    out_dir: &'a std::path::Path,
    keys: &'a [WrittenKey],
}

/// Generates a set after checking the options a user gave for it.
pub fn generate_checked(algorithms: &[KeyAlgorithm], rsa_bits: usize) -> Result<KeySet, Failure> {
    let algorithms = dedup(algorithms);
    if algorithms.is_empty() {
        return Err(Failure::usage(anyhow::anyhow!(
            "--algorithms is empty; name at least one of ed25519, ecdsa, rsa"
        )));
    }
    if algorithms.contains(&KeyAlgorithm::Rsa) && !(MIN_RSA_BITS..=MAX_RSA_BITS).contains(&rsa_bits) {
        return Err(Failure::usage(anyhow::anyhow!(
            "--rsa-bits {rsa_bits} is out of range; use {MIN_RSA_BITS} to {MAX_RSA_BITS} (default 3072)"
        )));
    }
    KeySet::generate(&algorithms, rsa_bits)
        .context("generating the key set")
        .map_err(Failure::usage)
}

/// Runs `keygen`.
pub fn run(args: &KeygenArgs, output: OutputFormat) -> Result<Status, Failure> {
    let set = generate_checked(&args.algorithms, args.rsa_bits)?;
    let written = set
        .write_dir(&args.out_dir, args.force)
        .map_err(|e| Failure::usage(anyhow::Error::new(e)))?;
    match output {
        OutputFormat::Json => output::print_json(&KeygenReport {
            out_dir: &args.out_dir,
            keys: &written,
        })
        .map_err(Failure::usage)?,
        _ => {
            let mut table = output::table(&["ALGORITHM", "FINGERPRINT", "PRIVATE KEY FILE"]);
            for k in &written {
                output::add_row(
                    &mut table,
                    vec![
                        k.algorithm.to_string(),
                        k.fingerprint.to_string(),
                        k.private_key_file.display().to_string(),
                    ],
                );
            }
            println!("{table}");
        }
    }
    Ok(Status::Success)
}

fn dedup(algorithms: &[KeyAlgorithm]) -> Vec<KeyAlgorithm> {
    let mut out: Vec<KeyAlgorithm> = Vec::new();
    for a in algorithms {
        if !out.contains(a) {
            out.push(*a);
        }
    }
    out
}
