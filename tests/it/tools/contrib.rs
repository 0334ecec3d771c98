//! What contrib/ ships, held together without a bed: the cloud-init
//! example embeds contrib/systemd's units.

use std::path::Path;

/// The cloud-init example carries contrib/systemd's units verbatim.
#[test]
fn the_cloud_init_example_embeds_the_unit_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib");
    let example = std::fs::read_to_string(root.join("cloud-init/hostkeyctl.yaml")).unwrap();
    for unit in ["hostkeyctl-install.service", "hostkeyctl-install.timer"] {
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
        assert!(example.contains(&indented), "{unit} differs in the cloud-init example");
    }
}
