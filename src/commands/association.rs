//! `hostkeyctl association deploy|show|delete`: parses, runs the
//! [`crate::association`] flows, prints.

use crate::association::{self, DeployRequest, DocumentCheck};
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
    // The setup document first: a converge association on nodes that have
    // no hostkeyctl and never get it would only fail.
    if args.deliver {
        crate::rollout::deliver::settle_setup(documents, &args.setup_document)
            .await
            .map_err(Failure::from)?;
    }
    let outcome = association::deploy(store, documents, associations, &request).await?;
    let setup = if args.deliver {
        // The secret as the converge association names it (its ARN).
        let arn = outcome
            .association
            .spec
            .parameters
            .get("SecretId")
            .and_then(|v| v.first())
            .cloned()
            .unwrap_or_default();
        Some(
            association::deploy_setup(
                documents,
                associations,
                &request,
                &args.setup_document,
                &arn,
                &args.imds,
            )
            .await?,
        )
    } else {
        None
    };
    if output == OutputFormat::Json {
        let mut report = serde_json::to_value(&outcome).map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
        if let Some(setup) = &setup {
            report["setup"] = serde_json::to_value(setup).map_err(|e| Failure::usage(anyhow::anyhow!(e)))?;
        }
        output::print_json(&report).map_err(Failure::usage)?;
    } else {
        print!("{}", outcome.text(name));
        if let Some(setup) = &setup {
            print!("{}", setup.text(&association::setup_name(name)));
        }
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
    // An association that runs something else is drift to act on.
    Ok(match shown.document {
        DocumentCheck::Ours => Status::Success,
        DocumentCheck::Other { .. } => Status::Drift,
    })
}

async fn run_delete(name: &str, associations: &SsmAssociations, output: OutputFormat) -> Result<Status, Failure> {
    let deleted = association::delete(associations, name).await?;
    if output == OutputFormat::Json {
        output::print_json(&serde_json::json!({
            "association": name,
            "result": if deleted.is_some() { "deleted" } else { "absent" },
            "association_id": deleted,
        }))
        .map_err(Failure::usage)?;
    } else {
        match deleted {
            Some(id) => println!(
                "association {} ({}): deleted. The nodes keep what it installed; push, or their timers, converge them from now on",
                escape(name),
                escape(&id)
            ),
            None => println!("association {}: there is none; nothing to delete", escape(name)),
        }
    }
    Ok(Status::Success)
}
