//! What contrib/ ships, held together without a bed: the cloud-init
//! example embeds contrib/systemd's units.

use std::path::Path;

/// The cloud-init examples carry contrib/systemd's units verbatim.
#[test]
fn the_cloud_init_examples_embed_the_unit_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib");
    for (file, units) in [
        (
            "hostkeyctl.yaml",
            &[
                "hostkeyctl-install.service",
                "hostkeyctl-install.timer",
                "hostkeyctl-imds-guard.service",
            ][..],
        ),
        (
            "hostkeyctl-enroll.yaml",
            &["hostkeyctl-enroll.service", "hostkeyctl-enroll.timer"][..],
        ),
    ] {
        embeds(&root, file, units);
    }
}

/// `contrib/cloud-init/<file>` holds each of `units` as a `content: |` block.
fn embeds(root: &Path, file: &str, units: &[&str]) {
    let example = std::fs::read_to_string(root.join("cloud-init").join(file)).unwrap();
    for unit in units {
        let text = std::fs::read_to_string(root.join("systemd").join(unit)).unwrap();
        let indented: String = text
            .lines()
            .map(|l| {
                if l.is_empty() {
                    "\n".to_owned()
                } else {
                    format!("      {l}\n")
                }
            })
            .collect();
        assert!(example.contains(&indented), "{unit} differs in {file}");
    }
}
