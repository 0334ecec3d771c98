//! SSM Run Command through the AWS SDK.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_sdk_ssm::Client;
use aws_sdk_ssm::types::CommandInvocationStatus;

use crate::aws::{AwsError, Call};
use crate::dispatch::{
    CommandSpec, Deployed, Dispatcher, Invocation, InvocationSource, MAX_IDS_PER_COMMAND, Pacing, PollStats, Progress,
    VISIBILITY_GRACE, poll,
};
use crate::ids::Program;
use crate::ssm_document::Kind;

/// SSM Run Command through the AWS SDK.
#[derive(Clone, Debug)]
pub struct SsmDispatcher {
    client: Client,
    /// First polling interval; grows by half each round up to 5 s.
    pub first_poll: Duration,
}

/// Splits a plugin's Output into stdout and stderr at SSM's separator.
pub fn split_output(output: &str) -> (String, String) {
    match output.split_once("\n----------ERROR-------\n") {
        Some((out, err)) => (out.to_owned(), err.to_owned()),
        None => match output.strip_prefix("----------ERROR-------\n") {
            Some(err) => (String::new(), err.to_owned()),
            None => (output.to_owned(), String::new()),
        },
    }
}

/// The stdout and stderr of several plugins' outputs, each in order.
pub fn join_outputs<'a>(outputs: impl Iterator<Item = &'a str>) -> (String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    for output in outputs {
        let (o, e) = split_output(output);
        if !o.trim().is_empty() {
            out.push(o);
        }
        if !e.trim().is_empty() {
            err.push(e);
        }
    }
    (out.join("\n"), err.join("\n"))
}

impl SsmDispatcher {
    /// A dispatcher using `config`.
    pub fn new(config: &aws_config::SdkConfig) -> Self {
        SsmDispatcher {
            client: Client::new(config),
            first_poll: Duration::from_millis(500),
        }
    }
}

impl SsmDispatcher {
    /// The SDK client.
    pub(super) fn client(&self) -> &Client {
        &self.client
    }
}

impl crate::ssm_document::publish::Documents for SsmDispatcher {
    async fn deploy(&self, name: &str, kind: Kind, node_command: &Program) -> Result<(String, &'static str), AwsError> {
        super::documents::deploy(&self.client, name, kind, node_command).await
    }

    async fn deploy_text(&self, name: &str, text: &str) -> Result<(String, &'static str), AwsError> {
        super::documents::deploy_text(&self.client, name, text).await
    }
}

impl Dispatcher for SsmDispatcher {
    async fn document(&self, name: &str) -> Result<Option<Deployed>, AwsError> {
        super::documents::describe(&self.client, name).await
    }

    async fn document_content(&self, name: &str, version: &str) -> Result<Option<String>, AwsError> {
        super::documents::get(&self.client, name, version).await
    }

    async fn send(&self, spec: &CommandSpec, instance_ids: &[String]) -> Result<Vec<(String, Vec<String>)>, AwsError> {
        let call = Call::new("ssm:SendCommand", format!("document {}", spec.document));
        let mut sent = Vec::new();
        for batch in instance_ids.chunks(MAX_IDS_PER_COMMAND) {
            let parameters = spec.parameters.clone().unwrap_or_else(|| {
                BTreeMap::from([
                    ("commands".to_owned(), vec![spec.command_line.clone()]),
                    (
                        "executionTimeout".to_owned(),
                        vec![spec.execution_timeout.as_secs().max(1).to_string()],
                    ),
                ])
            });
            let out = self
                .client
                .send_command()
                .document_name(&spec.document)
                .set_document_version(spec.document_version.clone())
                .set_instance_ids(Some(batch.to_vec()))
                .set_parameters(Some(parameters.into_iter().collect()))
                .comment(spec.comment.chars().take(100).collect::<String>())
                .max_concurrency(&spec.max_concurrency)
                .max_errors(&spec.max_errors)
                .send()
                .await
                .map_err(|e| AwsError::from_sdk(e, &call))?;
            let id = out
                .command()
                .and_then(|c| c.command_id())
                .ok_or_else(|| AwsError::Service {
                    action: call.action,
                    resource: call.resource.clone(),
                    code: "NoCommandId".to_owned(),
                    message: "SendCommand answered without a command id".to_owned(),
                })?
                .to_owned();
            tracing::info!("sent command {id} to {} instance(s)", batch.len());
            sent.push((id, batch.to_vec()));
        }
        Ok(sent)
    }

    async fn wait(
        &self,
        commands: &[(String, Vec<String>)],
        deadline: Instant,
        progress: Progress<'_>,
    ) -> Result<(BTreeMap<String, Invocation>, PollStats), AwsError> {
        let pacing = Pacing {
            first_poll: self.first_poll,
            visibility_grace: VISIBILITY_GRACE,
        };
        poll(self, commands, deadline, progress, pacing).await
    }

    async fn cancel(&self, command_id: &str) -> Result<(), AwsError> {
        let call = Call::new("ssm:CancelCommand", format!("command {command_id}"));
        self.client
            .cancel_command()
            .command_id(command_id)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk(e, &call))?;
        Ok(())
    }
}

impl InvocationSource for SsmDispatcher {
    async fn list(&self, command_id: &str, calls: &mut usize) -> Result<Vec<Invocation>, AwsError> {
        let call = Call::new("ssm:ListCommandInvocations", format!("command {command_id}"));
        let mut pages = self
            .client
            .list_command_invocations()
            .command_id(command_id)
            .details(true)
            .max_results(50)
            .into_paginator()
            .send();
        let mut rows = Vec::new();
        while let Some(page) = pages.next().await {
            *calls += 1;
            let page = page.map_err(|e| AwsError::from_sdk(e, &call))?;
            for inv in page.command_invocations() {
                // A document of several steps (the setup document's
                // downloads, then its shell step) has a plugin per step:
                // their outputs in order, and the first failing step's code.
                let plugins = inv.command_plugins();
                let (stdout, stderr) = join_outputs(plugins.iter().map(|p| p.output().unwrap_or_default()));
                let codes: Vec<i32> = plugins.iter().map(|p| p.response_code()).filter(|c| *c != -1).collect();
                let response_code = codes.iter().copied().find(|c| *c != 0).or(codes.last().copied());
                rows.push(Invocation {
                    instance_id: inv.instance_id().unwrap_or_default().to_owned(),
                    command_id: command_id.to_owned(),
                    status: inv
                        .status()
                        .map(CommandInvocationStatus::as_str)
                        .unwrap_or("Unknown")
                        .to_owned(),
                    response_code,
                    stdout,
                    stderr,
                });
            }
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::split_output;

    #[test]
    fn plugin_output_splits_into_stdout_and_stderr() {
        assert_eq!(split_output("a\n----------ERROR-------\nb"), ("a".into(), "b".into()));
        assert_eq!(split_output("----------ERROR-------\nb"), ("".into(), "b".into()));
        assert_eq!(split_output("only out"), ("only out".into(), "".into()));
    }

    #[test]
    fn the_outputs_of_several_steps_join_in_order() {
        let (out, err) =
            super::join_outputs(["Content downloaded", "", "{\"a\":1}\n----------ERROR-------\nwarn"].into_iter());
        assert_eq!((out.as_str(), err.as_str()), ("Content downloaded\n{\"a\":1}", "warn"));
    }
}
