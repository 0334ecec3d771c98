//! Enrolment's pieces on the bed (work in progress, issue 46): the
//! bindings' conditional writes against the emulator's DynamoDB.

use hostkeyctl::aws::dynamodb::DynamoBindings;
use hostkeyctl::enrolment::{Binding, Bindings};

use crate::common::bed::{BedOptions, TestBed};

/// One writer wins from a read; a writer holding a stale read, or a second
/// first enrolment, writes nothing.
#[test]
fn a_binding_is_written_only_over_what_was_read() {
    let bed = TestBed::start(BedOptions {
        nodes: 1,
        ..BedOptions::default()
    });
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let config = runtime.block_on(bed.sdk_config(1));
    runtime.block_on(async {
        use aws_sdk_dynamodb::types::{
            AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
        };
        aws_sdk_dynamodb::Client::new(&config)
            .create_table()
            .table_name("hostkeyctl-enrolment")
            .billing_mode(BillingMode::PayPerRequest)
            .attribute_definitions(
                AttributeDefinition::builder()
                    .attribute_name("instance_id")
                    .attribute_type(ScalarAttributeType::S)
                    .build()
                    .unwrap(),
            )
            .key_schema(
                KeySchemaElement::builder()
                    .attribute_name("instance_id")
                    .key_type(KeyType::Hash)
                    .build()
                    .unwrap(),
            )
            .send()
            .await
            .unwrap();
    });
    let bindings = DynamoBindings::new(&config, "hostkeyctl-enrolment");
    let first = Binding {
        fingerprints: vec!["SHA256:a".to_owned(), "SHA256:b".to_owned()],
        last_issued_at: 100,
    };
    let later = Binding {
        last_issued_at: 200,
        ..first.clone()
    };
    let other = Binding {
        fingerprints: vec!["SHA256:thief".to_owned()],
        last_issued_at: 150,
    };
    runtime.block_on(async {
        let id = "i-0000000000000c001";
        assert_eq!(bindings.get(id).await.unwrap(), None);
        assert!(bindings.put(id, &first, None).await.unwrap());
        // A second first enrolment (a thief racing the node) loses.
        assert!(!bindings.put(id, &other, None).await.unwrap());
        assert_eq!(bindings.get(id).await.unwrap(), Some(first.clone()));
        assert!(bindings.put(id, &later, Some(&first)).await.unwrap());
        // A writer that read `first` before `later` was written loses.
        assert!(!bindings.put(id, &other, Some(&first)).await.unwrap());
        assert_eq!(bindings.get(id).await.unwrap(), Some(later.clone()));
    });
}
