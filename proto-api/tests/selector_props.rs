//! Property tests for the query languages and quantities: what is printed parses back to the
//! same thing, and matching agrees with a direct reading of the requirement.

// Helpers outside #[test] functions unwrap too: this whole crate is a test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use flotilla_api::selector::{FieldSelector, LabelRequirements, Operator, Requirement};
use flotilla_api::Quantity;
use proptest::prelude::*;

fn key() -> impl Strategy<Value = String> {
    (
        proptest::option::of("[a-z]([a-z0-9-]{0,6}[a-z0-9])?(\\.[a-z]{2,4})?"),
        "[A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?",
    )
        .prop_map(|(prefix, name)| match prefix {
            Some(p) => format!("{p}/{name}"),
            None => name,
        })
        .prop_filter("in/notin are keywords", |k| k != "in" && k != "notin")
}

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?"
    ]
}

fn requirement() -> impl Strategy<Value = Requirement> {
    (
        key(),
        prop::sample::select(vec![
            Operator::Equals,
            Operator::NotEquals,
            Operator::In,
            Operator::NotIn,
            Operator::Exists,
            Operator::DoesNotExist,
        ]),
        prop::collection::vec(value(), 1..4),
    )
        .prop_map(|(k, op, values)| {
            let values: Vec<&str> = match op {
                Operator::Equals | Operator::NotEquals => vec![values[0].as_str()],
                Operator::In | Operator::NotIn => values.iter().map(String::as_str).collect(),
                Operator::Exists | Operator::DoesNotExist => vec![],
            };
            Requirement::new(&k, op, values).unwrap()
        })
}

proptest! {
    #[test]
    fn label_selector_print_parse_round_trip(reqs in prop::collection::vec(requirement(), 0..5)) {
        let sel = LabelRequirements::new(reqs);
        let printed = sel.to_string();
        let parsed = LabelRequirements::parse(&printed);
        prop_assert_eq!(parsed.as_ref(), Ok(&sel), "{}", printed);
    }

    #[test]
    fn label_matching_agrees_with_the_definition(
        req in requirement(),
        labels in prop::collection::btree_map(key(), value(), 0..4),
        hit in any::<bool>(),
    ) {
        let mut labels: BTreeMap<String, String> = labels;
        // Half the time make sure the key is present with one of the values.
        if hit {
            let v = req.values().iter().next().cloned().unwrap_or_default();
            labels.insert(req.key().to_string(), v);
        }
        let got = labels.get(req.key());
        let in_set = got.is_some_and(|v| req.values().contains(v));
        let want = match req.operator() {
            Operator::Equals | Operator::In => in_set,
            Operator::NotEquals | Operator::NotIn => !in_set,
            Operator::Exists => got.is_some(),
            Operator::DoesNotExist => got.is_none(),
        };
        prop_assert_eq!(req.matches(&labels), want);
    }

    #[test]
    fn field_selector_print_parse_round_trip(
        terms in prop::collection::vec(
            ("[a-z]{1,6}(\\.[a-zA-Z]{1,6}){0,2}", any::<bool>(), "[ -~]{0,8}"),
            1..4,
        )
    ) {
        let text: Vec<String> = terms
            .iter()
            .map(|(path, eq, value)| {
                let escaped: String = value
                    .chars()
                    .flat_map(|c| {
                        let esc = matches!(c, '\\' | ',' | '=').then_some('\\');
                        esc.into_iter().chain(std::iter::once(c))
                    })
                    .collect();
                format!("{path}{}{escaped}", if *eq { "=" } else { "!=" })
            })
            .collect();
        let sel = FieldSelector::parse(&text.join(",")).unwrap();
        prop_assert_eq!(sel.requirements().len(), terms.len());
        for (req, (path, _, value)) in sel.requirements().iter().zip(&terms) {
            prop_assert_eq!(&req.path, path);
            prop_assert_eq!(&req.value, value);
        }
        prop_assert_eq!(FieldSelector::parse(&sel.to_string()).unwrap(), sel);
    }

    #[test]
    fn quantity_milli_round_trip(m in any::<i64>()) {
        let q = Quantity::from_milli(i128::from(m));
        prop_assert_eq!(q.milli_value(), i128::from(m));
        let parsed = Quantity::parse(&q.to_string()).unwrap();
        prop_assert_eq!(parsed.milli_value(), i128::from(m));
    }

    #[test]
    fn quantity_suffixes_scale(n in 0i64..1_000_000) {
        let q = |s: String| Quantity::parse(&s).unwrap().milli_value();
        let n128 = i128::from(n);
        prop_assert_eq!(q(format!("{n}m")), n128);
        prop_assert_eq!(q(format!("{n}")), n128 * 1000);
        prop_assert_eq!(q(format!("{n}k")), n128 * 1_000_000);
        prop_assert_eq!(q(format!("{n}Ki")), n128 * 1024 * 1000);
        prop_assert_eq!(q(format!("{n}e2")), n128 * 100_000);
    }
}
