use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn parse_err(s: &str) -> String {
    LabelSelector::parse(s).unwrap_err().message
}

#[test]
fn empty_selector_matches_everything() {
    let sel = LabelSelector::parse("").unwrap();
    assert!(sel.is_empty());
    assert!(sel.matches(&labels(&[])));
    assert!(LabelSelector::parse("   ").unwrap().is_empty());
}

#[test]
fn parses_every_operator_and_sorts_by_key() {
    let sel = LabelSelector::parse("z=1, y==2,x!=3,w in (b,a),v notin (c),u,!t,s>5,r<7").unwrap();
    assert_eq!(
        sel.to_string(),
        "r<7,s>5,!t,u,v notin (c),w in (a,b),x!=3,y==2,z=1"
    );
    let ops: Vec<Operator> = sel.requirements().iter().map(|r| r.operator).collect();
    assert_eq!(
        ops,
        [
            Operator::LessThan,
            Operator::GreaterThan,
            Operator::DoesNotExist,
            Operator::Exists,
            Operator::NotIn,
            Operator::In,
            Operator::NotEquals,
            Operator::DoubleEquals,
            Operator::Equals,
        ]
    );
}

#[test]
fn kube_proxy_selector_excludes_headless_services() {
    let sel = LabelSelector::parse(
        "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name",
    )
    .unwrap();
    assert!(sel.matches(&labels(&[("app", "web")])));
    assert!(!sel.matches(&labels(&[("service.kubernetes.io/headless", "")])));
}

#[test]
fn negative_operators_match_absent_labels() {
    let absent = labels(&[]);
    assert!(LabelSelector::parse("a!=1").unwrap().matches(&absent));
    assert!(
        LabelSelector::parse("a notin (1,2)")
            .unwrap()
            .matches(&absent)
    );
    assert!(LabelSelector::parse("!a").unwrap().matches(&absent));
    assert!(!LabelSelector::parse("a").unwrap().matches(&absent));
    assert!(!LabelSelector::parse("a in (1)").unwrap().matches(&absent));
    assert!(!LabelSelector::parse("a>0").unwrap().matches(&absent));
}

#[test]
fn empty_values_are_legal() {
    let sel = LabelSelector::parse("a=,b in (),c in (x,)").unwrap();
    assert_eq!(sel.to_string(), "a=,b in (),c in (,x)");
    assert!(sel.matches(&labels(&[("a", ""), ("b", ""), ("c", "x")])));
}

#[test]
fn keywords_are_values_where_values_are_expected() {
    let sel = LabelSelector::parse("a=in,b in (notin)").unwrap();
    assert!(sel.matches(&labels(&[("a", "in"), ("b", "notin")])));
}

#[test]
fn equalities_are_single_valued_positive_terms() {
    let sel = LabelSelector::parse("a=1,b==2,c in (3),d in (4,5),e!=6,f").unwrap();
    let eq = sel.equalities();
    assert_eq!(
        eq,
        [
            ("a".into(), "1".into()),
            ("b".into(), "2".into()),
            ("c".into(), "3".into())
        ]
    );
}

#[test]
fn malformed_selectors_name_the_problem_and_position() {
    let cases = [
        (
            "a=b c",
            "found 'c', expected: ',' or 'end of string' (at position 4)",
        ),
        ("a in b", "found 'b', expected: '(' (at position 5)"),
        ("a in (b", "found '', expected: ',' or ')' (at position 7)"),
        (
            "a in (b c)",
            "found 'c', expected: ',' or ')' (at position 8)",
        ),
        (
            "a,",
            "found '', expected: identifier after ',' (at position 2)",
        ),
        (
            ",a",
            "found ',', expected: !, identifier, or 'end of string' (at position 0)",
        ),
        (
            "a b",
            "expected: '=', '!=', '==', 'in', 'notin', '>' or '<' (at position 2)",
        ),
        ("!=a", "found '!=', expected: !, identifier"),
        ("a>b", "the value must be an integer"),
        ("a=(b)", "found '(', expected: identifier (at position 2)"),
    ];
    for (input, want) in cases {
        let err = parse_err(input);
        assert!(err.contains(want), "{input:?}: {err}");
        assert!(err.starts_with("unable to parse requirement: "), "{err}");
    }
}

#[test]
fn invalid_keys_and_values_are_rejected() {
    assert!(parse_err("-a=b").contains("invalid label key \"-a\""));
    assert!(parse_err("Example.com/a=b").contains("prefix part"));
    assert!(parse_err("/a=b").contains("prefix part must be non-empty"));
    assert!(parse_err("a/=b").contains("name part must be non-empty"));
    assert!(parse_err(&format!("{}=b", "k".repeat(64))).contains("no more than 63"));
    assert!(parse_err("a=b_").contains("invalid label value \"b_\""));
    assert!(parse_err("a=b/c").contains("invalid label value"));
    assert!(parse_err(&format!("a={}", "v".repeat(64))).contains("no more than 63"));
}

#[test]
fn field_selectors_parse_equality_and_inequality() {
    let sel =
        FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed,metadata.name==x").unwrap();
    assert_eq!(
        sel.to_string(),
        "spec.nodeName=n1,status.phase!=Failed,metadata.name=x"
    );
    assert_eq!(
        sel.fields(),
        ["spec.nodeName", "status.phase", "metadata.name"]
    );
    assert_eq!(
        sel.equalities(),
        [
            ("spec.nodeName".to_owned(), "n1".to_owned()),
            ("metadata.name".to_owned(), "x".to_owned())
        ]
    );
    assert!(FieldSelector::parse("").unwrap().is_empty());
}

#[test]
fn field_selector_absent_fields_compare_as_empty() {
    let get = |field: &str| (field == "spec.nodeName").then(|| "n1".to_owned());
    assert!(
        FieldSelector::parse("spec.clusterIP!=None")
            .unwrap()
            .matches(&get)
    );
    assert!(
        FieldSelector::parse("spec.schedulerName=")
            .unwrap()
            .matches(&get)
    );
    assert!(
        !FieldSelector::parse("spec.nodeName=")
            .unwrap()
            .matches(&get)
    );
    assert!(
        FieldSelector::parse("spec.nodeName=n1")
            .unwrap()
            .matches(&get)
    );
    assert!(
        !FieldSelector::parse("spec.nodeName!=n1")
            .unwrap()
            .matches(&get)
    );
}

#[test]
fn field_selector_values_unescape() {
    let sel = FieldSelector::parse(r"metadata.name=a\,b\=c\\d,spec.x!=y").unwrap();
    assert_eq!(sel.requirements()[0].value, r"a,b=c\d");
    assert_eq!(sel.to_string(), r"metadata.name=a\,b\=c\\d,spec.x!=y");
}

#[test]
fn field_selector_errors_explain_themselves() {
    let err = |s: &str| FieldSelector::parse(s).unwrap_err().message;
    assert_eq!(
        err("foo"),
        "invalid selector: 'foo'; can't understand 'foo'"
    );
    assert!(err("a=b=c").contains("unescaped character in value: ="));
    assert!(err(r"a=b\x").contains(r"invalid escape sequence: \x"));
    assert!(err(r"a=b\").contains(r"invalid escape sequence: \"));
}

fn key_strategy() -> impl Strategy<Value = String> {
    let name = "[a-z0-9]([-a-z0-9_.]{0,6}[a-z0-9])?";
    (
        prop::sample::select(vec!["", "example.com/", "app.kubernetes.io/"]),
        name,
    )
        .prop_map(|(prefix, name)| format!("{prefix}{name}"))
}

fn value_strategy() -> impl Strategy<Value = String> {
    "([A-Za-z0-9]([-A-Za-z0-9_.]{0,6}[A-Za-z0-9])?)?"
}

fn operator_strategy() -> impl Strategy<Value = Operator> {
    prop::sample::select(vec![
        Operator::Equals,
        Operator::DoubleEquals,
        Operator::NotEquals,
        Operator::In,
        Operator::NotIn,
        Operator::Exists,
        Operator::DoesNotExist,
        Operator::GreaterThan,
        Operator::LessThan,
    ])
}

fn requirement_with(
    keys: BoxedStrategy<String>,
    values: BoxedStrategy<String>,
) -> impl Strategy<Value = Requirement> {
    (
        keys,
        operator_strategy(),
        prop::collection::vec(values, 1..4),
        0i64..20,
    )
        .prop_map(|(key, op, values, n)| {
            let values = match op {
                Operator::Exists | Operator::DoesNotExist => Vec::new(),
                Operator::In | Operator::NotIn => values,
                Operator::GreaterThan | Operator::LessThan => vec![n.to_string()],
                _ => values[..1].to_vec(),
            };
            Requirement::new(&key, op, values).expect("generated requirements are valid")
        })
}

/// What a requirement means, written out independently of the implementation.
fn reference(r: &Requirement, labels: &BTreeMap<String, String>) -> bool {
    let have = labels.get(&r.key);
    let in_set = have.is_some_and(|v| r.values.iter().any(|w| w == v));
    let number = have.and_then(|v| v.parse::<i64>().ok());
    let bound = r.values.first().and_then(|v| v.parse::<i64>().ok());
    match r.operator {
        Operator::Equals | Operator::DoubleEquals | Operator::In => in_set,
        Operator::NotEquals | Operator::NotIn => !in_set,
        Operator::Exists => have.is_some(),
        Operator::DoesNotExist => have.is_none(),
        Operator::GreaterThan => matches!((number, bound), (Some(n), Some(b)) if n > b),
        Operator::LessThan => matches!((number, bound), (Some(n), Some(b)) if n < b),
    }
}

proptest! {
    #[test]
    fn label_selector_string_form_round_trips(
        reqs in prop::collection::vec(
            requirement_with(key_strategy().boxed(), value_strategy().boxed()), 0..6)
    ) {
        let sel = LabelSelector::from_requirements(reqs);
        let text = sel.to_string();
        let parsed = LabelSelector::parse(&text).map_err(|e| TestCaseError::fail(e.message))?;
        prop_assert_eq!(parsed, sel);
    }

    #[test]
    fn label_selector_matches_agrees_with_the_reference(
        reqs in prop::collection::vec(requirement_with(
            prop::sample::select(vec!["a", "b", "x.io/c"]).prop_map(str::to_owned).boxed(),
            prop::sample::select(vec!["", "1", "5", "v"]).prop_map(str::to_owned).boxed(),
        ), 0..4),
        labels in prop::collection::btree_map(
            prop::sample::select(vec!["a", "b", "x.io/c"]).prop_map(str::to_owned),
            prop::sample::select(vec!["", "1", "5", "v", "-3"]).prop_map(str::to_owned),
            0..3),
    ) {
        let sel = LabelSelector::parse(&LabelSelector::from_requirements(reqs.clone()).to_string())
            .map_err(|e| TestCaseError::fail(e.message))?;
        let want = reqs.iter().all(|r| reference(r, &labels));
        prop_assert_eq!(sel.matches(&labels), want);
    }

    #[test]
    fn field_selector_string_form_round_trips(
        terms in prop::collection::vec(
            ("[a-z]{1,5}(\\.[a-z]{1,5})?", any::<bool>(), "[a-z,=\\\\ ]{0,6}"), 0..4)
    ) {
        let terms: Vec<FieldRequirement> = terms
            .into_iter()
            .map(|(field, eq, value)| FieldRequirement {
                field,
                operator: if eq { FieldOperator::Equals } else { FieldOperator::NotEquals },
                value,
            })
            .collect();
        let sel = FieldSelector::from_requirements(terms);
        let parsed = FieldSelector::parse(&sel.to_string())
            .map_err(|e| TestCaseError::fail(e.message))?;
        prop_assert_eq!(parsed, sel);
    }
}
