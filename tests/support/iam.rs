//! An evaluator for the subset of IAM policy language our policies use, to test what they allow
//! without AWS: Allow and Deny statements, `Action` and `Resource`/`NotResource` with wildcards,
//! policy variables (`${aws:PrincipalTag/…}`), and the condition operators `StringEquals`,
//! `StringNotEquals`, `StringLike`, `StringNotLike`, `ArnEquals`, `ArnLike`, `Bool` and `Null`,
//! with `…IfExists` and the `ForAllValues:`/`ForAnyValue:` set qualifiers. Anything else in a
//! policy panics, so a statement is never half-understood.
//!
//! Semantics, as IAM documents them: a request is allowed when every resource it touches is
//! allowed by some Allow statement and no Deny statement matches it; condition operators are
//! ANDed, keys within an operator ANDed, values within a key ORed; a missing key fails a
//! condition, except for negated operators and `…IfExists` (true) and `ForAllValues` (vacuously
//! true); condition key names are case-insensitive, values are not. Resource tags are seen as
//! `aws:ResourceTag/<key>` and as the resource's service's own `<service>:ResourceTag/<key>`.

use std::collections::BTreeMap;

use serde_json::Value;

/// One resource a request touches, with its tags and the resource-level condition keys its
/// service sets on it (`ec2:Vpc` on a subnet, say).
#[derive(Debug, Clone)]
pub struct Resource {
    pub arn: String,
    pub tags: BTreeMap<String, String>,
    pub keys: BTreeMap<String, String>,
}

impl Resource {
    pub fn new(arn: impl Into<String>, tags: BTreeMap<String, String>) -> Self {
        Resource { arn: arn.into(), tags, keys: BTreeMap::new() }
    }

    /// Sets a resource-level condition key.
    pub fn keyed(mut self, key: &str, value: &str) -> Self {
        self.keys.insert(key.to_string(), value.to_string());
        self
    }
}

/// A request as IAM authorizes it: one action on one or more resources, in a context.
#[derive(Debug, Clone)]
pub struct Request {
    pub action: String,
    pub resources: Vec<Resource>,
    /// Request-level keys (`aws:RequestTag/…`, `aws:TagKeys`, `aws:PrincipalTag/…`,
    /// `iam:PassedToService`, …), each with its values.
    pub context: BTreeMap<String, Vec<String>>,
}

impl Request {
    pub fn new(action: &str, resources: Vec<Resource>) -> Self {
        Request { action: action.to_string(), resources, context: BTreeMap::new() }
    }

    /// Sets a request-level key.
    pub fn with(mut self, key: &str, values: &[&str]) -> Self {
        self.context.insert(key.to_string(), values.iter().map(|v| v.to_string()).collect());
        self
    }

    /// Tags in the request: `aws:RequestTag/<key>` for each, and `aws:TagKeys`.
    pub fn tagging(mut self, tags: &[(&str, &str)]) -> Self {
        for (k, v) in tags {
            self.context.insert(format!("aws:RequestTag/{k}"), vec![v.to_string()]);
        }
        self.context.insert("aws:TagKeys".into(), tags.iter().map(|(k, _)| k.to_string()).collect());
        self
    }

    /// The principal's tags (EKS Pod Identity's session tags).
    pub fn made_by(mut self, tags: &[(&str, &str)]) -> Self {
        for (k, v) in tags {
            self.context.insert(format!("aws:PrincipalTag/{k}"), vec![v.to_string()]);
        }
        self
    }
}

/// What the policy says of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// No Allow statement matched one of the resources.
    ImplicitlyDenied,
    /// A Deny statement matched.
    ExplicitlyDenied,
}

/// A parsed policy document.
pub struct Policy {
    statements: Vec<Value>,
}

impl Policy {
    pub fn parse(document: &str) -> Self {
        let doc: Value = serde_json::from_str(document).expect("the policy is JSON");
        assert_eq!(doc["Version"], "2012-10-17", "policy variables need version 2012-10-17");
        let statements = doc["Statement"].as_array().expect("Statement is a list").clone();
        for s in &statements {
            for key in s.as_object().expect("a statement is an object").keys() {
                assert!(
                    ["Sid", "Effect", "Action", "Resource", "NotResource", "Condition"].contains(&key.as_str()),
                    "the evaluator does not know {key:?}: {s}"
                );
            }
        }
        Policy { statements }
    }

    /// Several documents attached to one role: one policy as IAM evaluates them.
    pub fn union(policies: &[Policy]) -> Self {
        Policy { statements: policies.iter().flat_map(|p| p.statements.clone()).collect() }
    }

    pub fn statements(&self) -> &[Value] {
        &self.statements
    }

    pub fn decide(&self, request: &Request) -> Decision {
        assert!(!request.resources.is_empty(), "a request touches at least one resource");
        let mut allowed = true;
        for resource in &request.resources {
            let context = context_for(request, resource);
            let matching = |effect: &str| {
                self.statements
                    .iter()
                    .filter(|s| s["Effect"] == effect)
                    .any(|s| applies(s, request, resource, &context))
            };
            if matching("Deny") {
                return Decision::ExplicitlyDenied;
            }
            allowed &= matching("Allow");
        }
        if allowed {
            Decision::Allowed
        } else {
            Decision::ImplicitlyDenied
        }
    }
}

/// Request keys plus the resource's tags, keyed in lower case.
fn context_for(request: &Request, resource: &Resource) -> BTreeMap<String, Vec<String>> {
    let mut context: BTreeMap<String, Vec<String>> =
        request.context.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.clone())).collect();
    let service = resource.arn.split(':').nth(2).unwrap_or_default().to_string();
    for (k, v) in &resource.tags {
        for prefix in ["aws", service.as_str()] {
            context.insert(format!("{prefix}:resourcetag/{k}").to_ascii_lowercase(), vec![v.clone()]);
        }
    }
    for (k, v) in &resource.keys {
        context.insert(k.to_ascii_lowercase(), vec![v.clone()]);
    }
    context
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().map(|i| i.as_str().expect("strings only").to_string()).collect(),
        Value::Bool(b) => vec![b.to_string()],
        Value::Null => Vec::new(),
        other => panic!("not a string or list of strings: {other}"),
    }
}

fn applies(statement: &Value, request: &Request, resource: &Resource, context: &BTreeMap<String, Vec<String>>) -> bool {
    let action = strings(&statement["Action"])
        .iter()
        .any(|a| glob(&a.to_ascii_lowercase(), &request.action.to_ascii_lowercase()));
    let in_resources = |key: &str| {
        strings(&statement[key]).iter().any(|r| substitute(r, context).is_some_and(|r| glob(&r, &resource.arn)))
    };
    let resource_matches = match (statement.get("Resource"), statement.get("NotResource")) {
        (Some(_), None) => in_resources("Resource"),
        (None, Some(_)) => !in_resources("NotResource"),
        _ => panic!("a statement has Resource or NotResource: {statement}"),
    };
    action && resource_matches && conditions_hold(statement, context)
}

fn conditions_hold(statement: &Value, context: &BTreeMap<String, Vec<String>>) -> bool {
    let Some(conditions) = statement.get("Condition") else { return true };
    conditions.as_object().expect("Condition is an object").iter().all(|(operator, keys)| {
        keys.as_object()
            .expect("an operator maps keys to values")
            .iter()
            .all(|(key, wanted)| condition(operator, &key.to_ascii_lowercase(), &strings(wanted), context))
    })
}

/// One `operator: {key: values}` entry.
fn condition(operator: &str, key: &str, wanted: &[String], context: &BTreeMap<String, Vec<String>>) -> bool {
    let (set, operator) = match operator.split_once(':') {
        Some((set @ ("ForAllValues" | "ForAnyValue"), op)) => (Some(set), op),
        Some(_) => panic!("unknown qualifier in {operator}"),
        None => (None, operator),
    };
    let (operator, if_exists) = match operator.strip_suffix("IfExists") {
        Some(op) => (op, true),
        None => (operator, false),
    };
    let present = context.get(key).filter(|v| !v.is_empty());
    let wanted: Vec<Option<String>> = wanted.iter().map(|w| substitute(w, context)).collect();
    if operator == "Null" {
        assert!(set.is_none() && !if_exists, "Null takes no qualifier");
        let absent = present.is_none();
        return wanted.iter().flatten().any(|w| (w == "true") == absent);
    }
    let (negated, matches): (bool, fn(&str, &str) -> bool) = match operator {
        "StringEquals" | "ArnEquals" => (false, |w, v| w == v),
        "StringNotEquals" => (true, |w, v| w == v),
        "StringLike" | "ArnLike" => (false, glob),
        "StringNotLike" => (true, glob),
        "Bool" => (false, |w, v| w.eq_ignore_ascii_case(v)),
        other => panic!("the evaluator does not know the operator {other}"),
    };
    // A value matches when it matches any wanted value (a variable that does not resolve matches
    // nothing); a negated operator holds when it matches none.
    let one = |value: &str| {
        let any = wanted.iter().flatten().any(|w| matches(w, value));
        any != negated
    };
    match (set, present) {
        (Some("ForAllValues"), None) => true,
        (Some("ForAllValues"), Some(values)) => values.iter().all(|v| one(v)),
        (Some(_), None) => false,
        (Some(_), Some(values)) => values.iter().any(|v| one(v)),
        (None, None) => if_exists || negated,
        (None, Some(values)) => {
            assert_eq!(values.len(), 1, "{key} has several values: a set operator is needed");
            one(&values[0])
        }
    }
}

/// `${key}` replaced by the context's value; `None` when a variable does not resolve.
fn substitute(text: &str, context: &BTreeMap<String, Vec<String>>) -> Option<String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find('}').expect("a variable ends with }") + start;
        let key = rest[start + 2..end].to_ascii_lowercase();
        out.push_str(context.get(&key).and_then(|v| v.first())?);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    Some(out)
}

/// IAM's wildcard match: `*` any run of characters, `?` any one.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_evaluator_follows_iam_s_documented_rules() {
        assert!(glob("arn:aws:iam::*:role/spots-booster/*", "arn:aws:iam::1:role/spots-booster/a"));
        assert!(!glob("arn:aws:iam::*:role/spots-booster/*", "arn:aws:iam::1:role/other/a"));
        assert!(glob("a?c", "abc") && !glob("a?c", "ac"));
        let ctx = |pairs: &[(&str, &[&str])]| -> BTreeMap<String, Vec<String>> {
            pairs.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.iter().map(|s| s.to_string()).collect())).collect()
        };
        let w = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let empty = ctx(&[]);
        // Missing keys.
        assert!(!condition("StringEquals", "k", &w(&["a"]), &empty));
        assert!(condition("StringNotEquals", "k", &w(&["a"]), &empty));
        assert!(condition("StringEqualsIfExists", "k", &w(&["a"]), &empty));
        assert!(condition("ForAllValues:StringEquals", "k", &w(&["a"]), &empty));
        assert!(!condition("ForAnyValue:StringEquals", "k", &w(&["a"]), &empty));
        assert!(condition("Null", "k", &w(&["true"]), &empty));
        // Sets.
        let keys = ctx(&[("aws:TagKeys", &["a", "b"])]);
        assert!(!condition("ForAllValues:StringEquals", "aws:tagkeys", &w(&["a"]), &keys));
        assert!(condition("ForAllValues:StringEquals", "aws:tagkeys", &w(&["a", "b", "c"]), &keys));
        assert!(condition("ForAnyValue:StringEquals", "aws:tagkeys", &w(&["b"]), &keys));
        assert!(!condition("ForAllValues:StringNotEquals", "aws:tagkeys", &w(&["b"]), &keys));
        // Variables.
        let principal = ctx(&[("aws:PrincipalTag/eks-cluster-name", &["blue"]), ("k", &["blue"])]);
        assert!(condition("StringEquals", "k", &w(&["${aws:PrincipalTag/eks-cluster-name}"]), &principal));
        let unresolved = ctx(&[("k", &["blue"])]);
        assert!(!condition("StringEquals", "k", &w(&["${aws:PrincipalTag/eks-cluster-name}"]), &unresolved));
    }
}
