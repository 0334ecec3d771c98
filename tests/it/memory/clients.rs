//! What `known-hosts --client` lists for each client, in memory
//! ([`hostkeyctl::known_hosts::clients::served`] over the store double):
//! clients that accept any listed key get the announced set after the
//! current one; those that keep one key per host and type get the stage
//! the fleet is in; a pin is obeyed as it is.

use hostkeyctl::fingerprint::Fingerprint;
use hostkeyctl::known_hosts::clients::{Client, served};
use hostkeyctl::store::{STAGE_PENDING, StoredVersion, VersionSelector, stage};

use super::{current, pending_set, secret, world};

fn fingerprints(v: &StoredVersion) -> Vec<Fingerprint> {
    v.document.keys.keys().map(|k| k.fingerprint().clone()).collect()
}

fn listed(keys: &[ssh_key::PublicKey]) -> Vec<Fingerprint> {
    keys.iter().map(hostkeyctl::keyset::fingerprint_of).collect()
}

#[tokio::test]
async fn each_client_gets_the_sets_it_can_hold_through_a_rotation() {
    let (store, _fleet, _) = world(1).await;
    let current = current(&store).await;
    for client in [Client::Asyncssh, Client::Plink, Client::Paramiko, Client::Putty] {
        let steady = served(&store, &secret(), None, client).await.unwrap();
        assert_eq!(listed(&steady.keys), fingerprints(&current), "{client:?}");
        assert_eq!(steady.announced, None);
    }

    let next = pending_set(&store).await;
    let both: Vec<Fingerprint> = fingerprints(&current).into_iter().chain(fingerprints(&next)).collect();
    for client in [Client::Asyncssh, Client::Plink] {
        let announced = served(&store, &secret(), None, client).await.unwrap();
        assert_eq!(listed(&announced.keys), both, "{client:?}: current first, then next");
        assert_eq!(announced.announced.as_ref(), Some(&next.version_id));
    }
    for client in [Client::Openssh, Client::Paramiko, Client::Dropbear, Client::Putty] {
        let announced = served(&store, &secret(), None, client).await.unwrap();
        assert_eq!(listed(&announced.keys), fingerprints(&current), "{client:?}");
        assert_eq!(announced.announced.as_ref(), Some(&next.version_id), "{client:?}");
    }
    // The file to swap in at the promotion: the announced set alone.
    let ahead = served(
        &store,
        &secret(),
        Some(VersionSelector::Stage(stage(STAGE_PENDING))),
        Client::Asyncssh,
    )
    .await
    .unwrap();
    assert_eq!(listed(&ahead.keys), fingerprints(&next));
    assert_eq!(ahead.announced, None);
}
