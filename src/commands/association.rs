//! `hostkeyctl association deploy|show|delete`: parses, runs the
//! [`crate::association`] flows, prints.

use crate::association::{self, DeployRequest};
use crate::aws;
use crate::aws::SecretsManagerStore;
use crate::aws::ssm::SsmAssociations;
use crate::aws::ssm::SsmDispatcher;
use crate::cli::{AssociationCommand, AssociationDeployArgs, AssociationNameArgs, AssociationShowArgs, GlobalArgs};
use crate::commands::common::config_region;
use crate::escape::escape;
use crate::exit::{Failure, Status};
use crate::output::{self, OutputFormat};

/// Runs `association`.
pub async fn run(command: &AssociationCommand, global: &GlobalArgs, output: OutputFormat) -> Result<Status, Failure> {
    let config = aws::load_config(&global.aws).await?;
    let associations = SsmAssociations::new(&config);
    let documents = SsmDispatcher::new(&config);
    let store = SecretsManagerStore::new(&config);
    match command {
        AssociationCommand::Deploy(args) => {
            let region = config_region(&config)?;
            let name = name_of(&args.association, &store).await?;
            run_deploy(args, &name, &store, &documents, &associations, region.as_ref(), output).await
        }
        AssociationCommand::Show(args) => {
            let name = name_of(&args.association, &store).await?;
            run_show(args, &name, &documents, &associations, output).await
        }
        AssociationCommand::Delete(args) => {
            let name = name_of(args, &store).await?;
            run_delete(&name, &associations, output).await
        }
    }
}

/// `--name`, or the default from the secret's name as Secrets Manager
/// answers it, whether the secret is given by name or by ARN.
async fn name_of(args: &AssociationNameArgs, store: &SecretsManagerStore) -> Result<String, Failure> {
    match &args.name {
        Some(name) => Ok(name.clone()),
        None => association::name_for(store, &args.secret_id)
            .await
            .map_err(Failure::from),
    }
}

async fn run_deploy(
    args: &AssociationDeployArgs,
    name: &str,
    store: &SecretsManagerStore,
    documents: &SsmDispatcher,
    associations: &SsmAssociations,
    region: Option<&crate::ids::Region>,
    output: OutputFormat,
) -> Result<Status, Failure> {
    let request = DeployRequest {
        secret: &args.association.secret_id,
        region,
        name,
        targets: &args.targets,
        schedule: &args.schedule,
        document: &args.document.document,
        node_command: &args.document.node_command,
        max_concurrency: &args.max_concurrency,
        max_errors: &args.max_errors,
        allow_other_clusters: args.allow_other_clusters,
    };
    let setup = args
        .deliver
        .then_some((args.setup_document.as_str(), args.imds.as_str()));
    let report = association::deploy_with_setup(store, documents, associations, &request, setup).await?;
    if output == OutputFormat::Json {
        output::print_json(&report).map_err(Failure::usage)?;
    } else {
        print!("{}", report.text(name));
    }
    Ok(Status::Success)
}

async fn run_show(
    args: &AssociationShowArgs,
    name: &str,
    documents: &SsmDispatcher,
    associations: &SsmAssociations,
    output: OutputFormat,
) -> Result<Status, Failure> {
    let shown = association::show(
        documents,
        associations,
        name,
        &args.document.document,
        &args.document.node_command,
    )
    .await?;
    let Some(shown) = shown else {
        return Err(Failure::usage(anyhow::anyhow!(
            "no association is named {}: create it with `hostkeyctl association deploy --secret-id {} --target tag:KEY=VALUE`",
            escape(name),
            args.association.secret_id
        )));
    };
    if output == OutputFormat::Json {
        output::print_json(&shown).map_err(Failure::usage)?;
    } else {
        print!("{}", shown.text(name));
    }
    Ok(shown.status())
}

async fn run_delete(name: &str, associations: &SsmAssociations, output: OutputFormat) -> Result<Status, Failure> {
    let id = association::delete(associations, name).await?;
    let deleted = association::Deleted::new(name, id.as_deref());
    if output == OutputFormat::Json {
        output::print_json(&deleted).map_err(Failure::usage)?;
    } else {
        println!("{}", deleted.text());
    }
    Ok(Status::Success)
}
