//! IMDS: the node's instance identity document and its signature
//! (`/latest/dynamic/instance-identity/document` and `.../signature`, EC2
//! User Guide, "Instance identity documents"), through the SDK's IMDSv2
//! client (`AWS_EC2_METADATA_SERVICE_ENDPOINT` points it elsewhere).

/// The instance's IMDS.
#[derive(Clone, Debug)]
pub struct InstanceMetadata {
    client: aws_config::imds::Client,
}

impl Default for InstanceMetadata {
    fn default() -> Self {
        InstanceMetadata {
            client: aws_config::imds::Client::builder().build(),
        }
    }
}

impl crate::enrolment::node::Imds for InstanceMetadata {
    async fn identity(&self) -> Result<(String, String), String> {
        let get = |path: &'static str| async move {
            self.client
                .get(path)
                .await
                .map(String::from)
                .map_err(|e| format!("IMDS {path}: {e} (IMDS must be reachable by root on the node)"))
        };
        let document = get("/latest/dynamic/instance-identity/document").await?;
        let signature = get("/latest/dynamic/instance-identity/signature").await?;
        Ok((document, signature))
    }
}
