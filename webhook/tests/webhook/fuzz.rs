//! Robustness: arbitrary bodies and arbitrary specs through decode -> validate -> default.
//! Never a panic; always a 200 review or a 4xx with a reason. Cases: PROPTEST_CASES (default 2000).

use crate::common::*;
use proptest::prelude::*;
use serde_json::{json, Value};

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        "[a-zA-Z0-9:@/ .\\-]{0,12}".prop_map(Value::String),
        prop_oneof![
            Just("09:00"),
            Just("25:00"),
            Just("Europe/Berlin"),
            Just("@hourly"),
            Just("* * * * *"),
            Just("Mon")
        ]
        .prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("name".to_string()),
                    Just("namespace".to_string()),
                    Just("size".to_string()),
                    Just("port".to_string()),
                    Just("deployments".to_string()),
                    Just("start".to_string()),
                    Just("end".to_string()),
                    Just("jobs".to_string()),
                    Just("schedule".to_string()),
                    Just("replicas".to_string()),
                    Just("days".to_string()),
                    Just("timeZone".to_string()),
                    Just("password".to_string()),
                    Just("groups".to_string()),
                    Just("email".to_string()),
                    Just("resources".to_string()),
                    Just("requests".to_string()),
                    "[a-z]{1,6}",
                ],
                inner,
                0..6,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

const KINDS: [(&str, &str); 4] = [
    ("scaler-create.json", "scalers"),
    ("welcome-create.json", "welcomes"),
    ("memcached-create.json", "memcacheds"),
    ("application-create.json", "applications"),
];

proptest! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_specs_get_an_answer_never_a_panic(spec in arb_json(), which in 0usize..KINDS.len(), mutate in any::<bool>()) {
        let (file, plural) = KINDS[which];
        let review = with_spec(file, spec);
        let path = format!("/{}/{plural}", if mutate { "mutate" } else { "validate" });
        let reply = runtime().block_on(send(cluster(), &path, &review));
        prop_assert_eq!(reply.status.as_u16(), 200, "{}", reply.body);
        if reply.allowed() {
            if let Some(patch) = reply.patch() {
                let mut object = review["request"]["object"].clone();
                prop_assert!(json_patch::patch(&mut object, &patch).is_ok(), "patch must apply");
            }
        } else {
            prop_assert!(!reply.message().is_empty());
        }
    }

    #[test]
    fn arbitrary_bodies_get_a_review_or_a_400(body in arb_json(), which in 0usize..KINDS.len()) {
        let (_, plural) = KINDS[which];
        let reply = runtime().block_on(send(cluster(), &format!("/validate/{plural}"), &json!({"request": body})));
        prop_assert!(matches!(reply.status.as_u16(), 200 | 400), "{} {}", reply.status, reply.body);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let reply = runtime().block_on(send_raw(cluster(), "/mutate/welcomes", bytes));
        prop_assert_eq!(reply.status.as_u16(), 400);
    }
}
