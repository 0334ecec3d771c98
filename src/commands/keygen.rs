//! `hostkeyctl keygen`: generate a key set offline and write it as files.

use serde::Serialize;

use crate::cli::KeygenArgs;
use crate::exit::{Failure, Status};
use crate::keyset::KeySet;
use crate::keyset::WrittenKey;
use crate::output::{self, OutputFormat};

#[derive(Serialize)]
struct KeygenReport<'a> {
    out_dir: &'a std::path::Path,
    keys: &'a [WrittenKey],
}

/// Runs `keygen`.
pub fn run(args: &KeygenArgs, output: OutputFormat) -> Result<Status, Failure> {
    let set = KeySet::generate(&args.algorithms, args.rsa_bits)?;
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
            output::keep_whole(&mut table, 1);
            println!("{table}");
        }
    }
    Ok(Status::Success)
}
