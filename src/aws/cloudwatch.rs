//! CloudWatch: the audit's metrics (`PutMetricData`), the
//! [`crate::audit::metrics::MetricsSink`] of `audit --cloudwatch`.

use aws_sdk_cloudwatch::types::{Dimension, MetricDatum, StandardUnit};

use crate::audit::metrics::{Datum, MetricsSink};
use crate::aws::{AwsError, Call};

/// CloudWatch through the AWS SDK.
#[derive(Clone, Debug)]
pub struct CloudWatch {
    client: aws_sdk_cloudwatch::Client,
}

impl CloudWatch {
    /// A client for `config`'s region and credentials.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        CloudWatch {
            client: aws_sdk_cloudwatch::Client::new(config),
        }
    }
}

impl MetricsSink for CloudWatch {
    async fn put(&self, namespace: &str, datums: &[Datum]) -> Result<(), AwsError> {
        let call = Call::new("cloudwatch:PutMetricData", format!("namespace {namespace}"));
        let now = aws_sdk_cloudwatch::primitives::DateTime::from(std::time::SystemTime::now());
        let data: Vec<MetricDatum> = datums
            .iter()
            .map(|d| {
                MetricDatum::builder()
                    .metric_name(d.name)
                    .set_dimensions(
                        d.verdict
                            .map(|v| vec![Dimension::builder().name("Verdict").value(v).build()]),
                    )
                    .value(d.value)
                    .unit(StandardUnit::from(d.unit))
                    .timestamp(now)
                    .build()
            })
            .collect();
        self.client
            .put_metric_data()
            .namespace(namespace)
            .set_metric_data(Some(data))
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(())
    }
}
