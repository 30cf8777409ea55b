//! The `instance-manager` ConfigMap: `boundaries` (restricted; shared merge, mergeOverride,
//! replace), `defaults` and `conditionals`, applied in memory to an InstanceGroup before validation
//! exactly as the reference describes. Pure: the ConfigMap's data and the object in, the effective
//! object out; the spec on the API server is never rewritten.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

/// Namespace annotation that opts every InstanceGroup in it out of the ConfigMap.
pub(crate) const ANNOTATION_CONFIG_EXCLUDED: &str = "instancemgr.keikoproj.io/config-excluded";

/// Reading the ConfigMap failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadConfigError {
    /// A data key is not the YAML it should be.
    #[error("instance-manager ConfigMap: data.{key} is not valid: {message}")]
    Malformed {
        /// `boundaries`, `defaults` or `conditionals`.
        key: &'static str,
        /// The parser's message.
        message: String,
    },
    /// An annotation selector does not parse.
    #[error("instance-manager ConfigMap: conditionals[{index}].annotationSelector {selector:?}: {message}")]
    Selector {
        /// Position in the list.
        index: usize,
        /// The selector.
        selector: String,
        /// What is wrong.
        message: String,
    },
}

/// `data.boundaries`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Boundaries {
    /// Paths only the ConfigMap may set.
    #[serde(default)]
    pub restricted: Vec<String>,
    /// Paths both may set.
    #[serde(default)]
    pub shared: Shared,
}

/// `boundaries.shared`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Shared {
    /// Merged; the default wins collisions.
    #[serde(default)]
    pub merge: Vec<String>,
    /// Merged; the InstanceGroup wins collisions.
    #[serde(default)]
    pub(crate) merge_override: Vec<String>,
    /// The InstanceGroup's value replaces the default entirely.
    #[serde(default)]
    pub replace: Vec<String>,
}

/// One requirement of an annotation selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Equals(String, String),
    NotEquals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A label-selector expression evaluated against annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Selector(Vec<Requirement>);

impl Selector {
    /// Parses `k = v`, `k == v`, `k != v`, `k in (a, b)`, `k notin (a)`, `k`, `!k`, comma-separated.
    pub fn parse(text: &str) -> Result<Selector, String> {
        let mut parts = Vec::new();
        let (mut depth, mut start) = (0usize, 0usize);
        for (i, c) in text.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth = depth.checked_sub(1).ok_or("unbalanced ')'")?,
                ',' if depth == 0 => {
                    parts.push(&text[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        if depth != 0 {
            return Err("unbalanced '('".into());
        }
        parts.push(&text[start..]);
        let mut requirements = Vec::new();
        for part in parts.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
            requirements.push(Self::requirement(part)?);
        }
        Ok(Selector(requirements))
    }

    fn requirement(part: &str) -> Result<Requirement, String> {
        let key = |k: &str| -> Result<String, String> {
            let k = k.trim();
            if k.is_empty() || k.contains(char::is_whitespace) {
                Err(format!("{part:?} has no valid key"))
            } else {
                Ok(k.to_string())
            }
        };
        let set = |rest: &str| -> Result<Vec<String>, String> {
            let inner = rest
                .trim()
                .strip_prefix('(')
                .and_then(|r| r.strip_suffix(')'))
                .ok_or(format!("{part:?}: expected (values)"))?;
            Ok(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
        };
        if let Some((k, v)) = part.split_once("!=") {
            return Ok(Requirement::NotEquals(key(k)?, v.trim().to_string()));
        }
        if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            return Ok(Requirement::Equals(key(k)?, v.trim().to_string()));
        }
        let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
        match words.as_slice() {
            [k, rest] if rest.trim_start().starts_with("notin") => {
                Ok(Requirement::NotIn(key(k)?, set(rest.trim_start().trim_start_matches("notin"))?))
            }
            [k, rest] if rest.trim_start().starts_with("in") => {
                Ok(Requirement::In(key(k)?, set(rest.trim_start().trim_start_matches("in"))?))
            }
            [k] => match k.strip_prefix('!') {
                Some(k) => Ok(Requirement::NotExists(key(k)?)),
                None => Ok(Requirement::Exists(key(k)?)),
            },
            _ => Err(format!("{part:?} is not a selector requirement")),
        }
    }

    /// Whether the annotations satisfy every requirement.
    pub fn matches(&self, annotations: &BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Equals(k, v) => annotations.get(k) == Some(v),
            Requirement::NotEquals(k, v) => annotations.get(k) != Some(v),
            Requirement::In(k, vs) => annotations.get(k).is_some_and(|a| vs.contains(a)),
            Requirement::NotIn(k, vs) => annotations.get(k).is_none_or(|a| !vs.contains(a)),
            Requirement::Exists(k) => annotations.contains_key(k),
            Requirement::NotExists(k) => !annotations.contains_key(k),
        })
    }
}

/// A conditional default.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Conditional {
    /// Which InstanceGroups it applies to, by annotation.
    pub selector: Selector,
    /// A partial InstanceGroup.
    pub defaults: Value,
}

/// The parsed ConfigMap.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceManagerConfig {
    /// Boundaries.
    pub boundaries: Boundaries,
    /// Defaults (a partial InstanceGroup).
    pub defaults: Value,
    /// Conditional defaults, in order.
    pub(crate) conditionals: Vec<Conditional>,
    /// MD5 of the data: `status.configMD5`.
    pub md5: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawConditional {
    annotation_selector: String,
    #[serde(default)]
    defaults: Value,
}

impl InstanceManagerConfig {
    /// Parses the ConfigMap's data.
    pub fn parse(data: &BTreeMap<String, String>) -> Result<Self, LoadConfigError> {
        fn yaml<T: serde::de::DeserializeOwned + Default>(
            data: &BTreeMap<String, String>,
            key: &'static str,
        ) -> Result<T, LoadConfigError> {
            match data.get(key).filter(|s| !s.trim().is_empty()) {
                None => Ok(T::default()),
                Some(text) => crate::yaml_guard::read_yaml(text)
                    .map_err(|e| LoadConfigError::Malformed { key, message: e.to_string() }),
            }
        }
        let boundaries: Boundaries = yaml(data, "boundaries")?;
        let defaults: Value = yaml(data, "defaults")?;
        let raw: Vec<RawConditional> = yaml(data, "conditionals")?;
        let conditionals = raw
            .into_iter()
            .enumerate()
            .map(|(index, c)| {
                let selector = Selector::parse(&c.annotation_selector).map_err(|message| {
                    LoadConfigError::Selector { index, selector: c.annotation_selector.clone(), message }
                })?;
                Ok(Conditional { selector, defaults: c.defaults })
            })
            .collect::<Result<_, LoadConfigError>>()?;
        Ok(InstanceManagerConfig { boundaries, defaults, conditionals, md5: data_md5(data) })
    }

    /// Applies the ConfigMap to an InstanceGroup (as JSON): replace, merge, mergeOverride, then
    /// restricted.
    pub fn apply(&self, object: &Value, annotations: &BTreeMap<String, String>) -> Value {
        let matching: Vec<&Value> =
            self.conditionals.iter().filter(|c| c.selector.matches(annotations)).map(|c| &c.defaults).collect();
        let mut out = object.clone();
        for path in &self.boundaries.shared.replace {
            if get(&out, path).is_none() {
                if let Some(default) = self.effective_default(path, &matching, None) {
                    set(&mut out, path, default);
                }
            }
        }
        for (paths, mode) in [
            (&self.boundaries.shared.merge, Mode::DefaultWins),
            (&self.boundaries.shared.merge_override, Mode::ObjectWins),
        ] {
            for path in paths {
                let Some(default) = self.effective_default(path, &matching, Some(path)) else { continue };
                let merged = match get(&out, path) {
                    Some(own) => merge(&default, own, mode, path),
                    None => default,
                };
                set(&mut out, path, merged);
            }
        }
        for path in &self.boundaries.restricted {
            match self.effective_default(path, &matching, None) {
                Some(value) => set(&mut out, path, value),
                None => remove(&mut out, path),
            }
        }
        out
    }

    /// `defaults` at `path`, with each matching conditional applied in order (the last wins).
    /// For merge paths a conditional is merged into the default and wins collisions.
    fn effective_default(&self, path: &str, matching: &[&Value], merge_path: Option<&str>) -> Option<Value> {
        let mut value = get(&self.defaults, path).cloned();
        for conditional in matching {
            let Some(c) = get(conditional, path) else { continue };
            value = Some(match (value, merge_path) {
                (Some(base), Some(p)) => merge(&base, c, Mode::ObjectWins, p),
                _ => c.clone(),
            });
        }
        value
    }
}

/// MD5 of the ConfigMap data (keys in order), as hex.
pub(crate) fn data_md5(data: &BTreeMap<String, String>) -> String {
    use md5::Digest;
    let mut hasher = md5::Md5::new();
    for (k, v) in data {
        hasher.update(k.as_bytes());
        hasher.update([0]);
        hasher.update(v.as_bytes());
        hasher.update([0]);
    }
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    DefaultWins,
    ObjectWins,
}

fn list_key(path: &str) -> Option<&'static str> {
    match path.rsplit('.').next()? {
        "tags" => Some("key"),
        "volumes" | "lifecycleHooks" | "userData" => Some("name"),
        _ => None,
    }
}

fn merge(default: &Value, own: &Value, mode: Mode, path: &str) -> Value {
    match (default, own) {
        (Value::Array(defaults), Value::Array(owns)) => {
            let mut out = defaults.clone();
            for item in owns {
                let existing = match list_key(path) {
                    Some(key) => out.iter().position(|d| d.get(key).is_some() && d.get(key) == item.get(key)),
                    None => out.iter().position(|d| d == item),
                };
                match existing {
                    Some(i) if mode == Mode::ObjectWins => out[i] = item.clone(),
                    Some(_) => {}
                    None => out.push(item.clone()),
                }
            }
            Value::Array(out)
        }
        (Value::Object(defaults), Value::Object(owns)) => {
            let mut out = defaults.clone();
            for (k, v) in owns {
                if mode == Mode::ObjectWins || !out.contains_key(k) {
                    out.insert(k.clone(), v.clone());
                }
            }
            Value::Object(out)
        }
        _ => own.clone(),
    }
}

fn get<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |v, key| v.get(key)).filter(|v| !v.is_null())
}

fn set(value: &mut Value, path: &str, new: Value) {
    let mut current = value;
    let keys: Vec<&str> = path.split('.').collect();
    for key in &keys[..keys.len() - 1] {
        if !current.get(*key).is_some_and(Value::is_object) {
            current[*key] = Value::Object(Map::new());
        }
        current = current.get_mut(*key).expect("just made an object");
    }
    current[keys[keys.len() - 1]] = new;
}

fn remove(value: &mut Value, path: &str) {
    let (parent, last) = path.rsplit_once('.').unwrap_or(("", path));
    let target = if parent.is_empty() { Some(value) } else { parent.split('.').try_fold(value, |v, k| v.get_mut(k)) };
    if let Some(Value::Object(map)) = target {
        map.remove(last);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn config(boundaries: &str, defaults: &str, conditionals: &str) -> InstanceManagerConfig {
        let data = BTreeMap::from([
            ("boundaries".to_string(), boundaries.to_string()),
            ("defaults".to_string(), defaults.to_string()),
            ("conditionals".to_string(), conditionals.to_string()),
        ]);
        InstanceManagerConfig::parse(&data).unwrap()
    }

    fn tags_of(v: &Value) -> Vec<(String, String)> {
        get(v, "spec.eks.configuration.tags")
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .map(|t| (t["key"].as_str().unwrap().to_string(), t["value"].as_str().unwrap().to_string()))
            .collect()
    }

    #[test]
    fn the_worked_tags_example_for_every_shared_rule() {
        let defaults = "spec: {eks: {configuration: {tags: [{key: A, value: a}, {key: B, value: b}]}}}";
        let object = json!({"spec": {"eks": {"configuration": {"tags": [{"key": "A", "value": "d"}, {"key": "C", "value": "c"}]}}}});
        let pairs =
            |list: &[(&str, &str)]| list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        for (rule, expected) in [
            ("merge", pairs(&[("A", "a"), ("B", "b"), ("C", "c")])),
            ("mergeOverride", pairs(&[("A", "d"), ("B", "b"), ("C", "c")])),
            ("replace", pairs(&[("A", "d"), ("C", "c")])),
        ] {
            let c = config(&format!("shared: {{{rule}: [spec.eks.configuration.tags]}}"), defaults, "");
            assert_eq!(tags_of(&c.apply(&object, &BTreeMap::new())), expected, "{rule}");
        }
    }

    #[test]
    fn each_rule_on_scalars_maps_and_plain_lists() {
        let defaults = "spec: {eks: {configuration: {image: ami-default, labels: {a: default, b: default}, securityGroups: [sg-1]}}}";
        let object = json!({"spec": {"eks": {"configuration": {
            "image": "ami-own", "labels": {"a": "own", "c": "own"}, "securityGroups": ["sg-2", "sg-1"]}}}});
        let conf = |v: &Value, k: &str| get(v, &format!("spec.eks.configuration.{k}")).cloned();

        let merged = config(
            "shared: {merge: [spec.eks.configuration.image, spec.eks.configuration.labels, spec.eks.configuration.securityGroups]}",
            defaults,
            "",
        )
        .apply(&object, &BTreeMap::new());
        assert_eq!(conf(&merged, "image"), Some(json!("ami-own")), "a merged scalar: the object wins");
        assert_eq!(conf(&merged, "labels"), Some(json!({"a": "default", "b": "default", "c": "own"})));
        assert_eq!(conf(&merged, "securityGroups"), Some(json!(["sg-1", "sg-2"])), "deduplicated by equality");

        let overridden = config("shared: {mergeOverride: [spec.eks.configuration.labels]}", defaults, "")
            .apply(&object, &BTreeMap::new());
        assert_eq!(conf(&overridden, "labels"), Some(json!({"a": "own", "b": "default", "c": "own"})));

        let empty = json!({"spec": {"eks": {"configuration": {}}}});
        let replaced =
            config("shared: {replace: [spec.eks.configuration.image]}", defaults, "").apply(&empty, &BTreeMap::new());
        assert_eq!(conf(&replaced, "image"), Some(json!("ami-default")), "replace fills a missing value");
        let kept = config("shared: {replace: [spec.eks.configuration.keyPairName]}", defaults, "")
            .apply(&object, &BTreeMap::new());
        assert_eq!(kept, object, "replace without a default changes nothing");

        let restricted =
            config("restricted: [spec.eks.configuration.image, spec.eks.configuration.keyPairName]", defaults, "");
        let mut with_key = object.clone();
        with_key["spec"]["eks"]["configuration"]["keyPairName"] = json!("mine");
        let out = restricted.apply(&with_key, &BTreeMap::new());
        assert_eq!(conf(&out, "image"), Some(json!("ami-default")), "restricted: the default wins");
        assert_eq!(conf(&out, "keyPairName"), None, "restricted without a default clears the field");
    }

    #[test]
    fn conditionals_apply_in_order_and_merge_into_defaults() {
        let defaults = "spec: {eks: {configuration: {image: ami-0, labels: {team: platform}}}}";
        let conditionals = r#"
- annotationSelector: 'os in (bottlerocket, flatcar)'
  defaults: {spec: {eks: {configuration: {image: ami-1, labels: {os: br}}}}}
- annotationSelector: 'os = bottlerocket, arch != amd64'
  defaults: {spec: {eks: {configuration: {image: ami-2, labels: {team: arm}}}}}
"#;
        let c = config(
            "restricted: [spec.eks.configuration.image]\nshared: {merge: [spec.eks.configuration.labels]}",
            defaults,
            conditionals,
        );
        let object = json!({"spec": {"eks": {"configuration": {"image": "ami-own", "labels": {"mine": "x"}}}}});
        let annotations = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let image = |a: &BTreeMap<String, String>| get(&c.apply(&object, a), "spec.eks.configuration.image").cloned();
        assert_eq!(image(&annotations(&[])), Some(json!("ami-0")));
        assert_eq!(image(&annotations(&[("os", "bottlerocket"), ("arch", "amd64")])), Some(json!("ami-1")));
        assert_eq!(
            image(&annotations(&[("os", "bottlerocket"), ("arch", "arm64")])),
            Some(json!("ami-2")),
            "the last match wins"
        );
        let out = c.apply(&object, &annotations(&[("os", "bottlerocket"), ("arch", "arm64")]));
        assert_eq!(
            get(&out, "spec.eks.configuration.labels"),
            Some(&json!({"team": "arm", "os": "br", "mine": "x"})),
            "conditionals merge into the default and win its collisions"
        );
    }

    #[test]
    fn a_config_map_nested_past_the_limit_is_refused_naming_its_key() {
        let data = BTreeMap::from([("defaults".to_string(), format!("spec: {}", "{a: ".repeat(100_000)))]);
        let err = InstanceManagerConfig::parse(&data).unwrap_err().to_string();
        assert_eq!(
            err,
            "instance-manager ConfigMap: data.defaults is not valid: nested 100000 levels deep, more than the 16 accepted"
        );
    }

    #[test]
    fn selectors_parse_every_operator_and_reject_nonsense() {
        let a: BTreeMap<String, String> = [("k".to_string(), "v".to_string())].into();
        for (text, expected) in [
            ("k = v", true),
            ("k == v", true),
            ("k != v", false),
            ("k in (a, v)", true),
            ("k notin (v)", false),
            ("k", true),
            ("!k", false),
            ("!other", true),
            ("k = v, other", false),
            ("", true),
        ] {
            assert_eq!(Selector::parse(text).unwrap().matches(&a), expected, "{text:?}");
        }
        assert!(Selector::parse("k in (a").is_err());
        assert!(Selector::parse("a b c").is_err());
        let data = BTreeMap::from([("conditionals".to_string(), "- annotationSelector: 'k in (a'".to_string())]);
        let err = InstanceManagerConfig::parse(&data).unwrap_err().to_string();
        assert!(err.contains("conditionals[0].annotationSelector"), "{err}");
        let data = BTreeMap::from([("boundaries".to_string(), "restricted: {oops".to_string())]);
        assert!(InstanceManagerConfig::parse(&data).unwrap_err().to_string().contains("data.boundaries"));
    }

    #[test]
    fn the_reference_configmap_applied_to_the_reference_group() {
        #[derive(Deserialize)]
        struct ConfigMap {
            data: BTreeMap<String, String>,
        }
        let cm: ConfigMap = serde_yaml::from_str(include_str!("../testdata/instance-manager-configmap.yaml")).unwrap();
        let c = InstanceManagerConfig::parse(&cm.data).unwrap();
        let ig: Value = serde_yaml::from_str(include_str!("../testdata/batch-spot.yaml")).unwrap();
        let annotations: BTreeMap<String, String> =
            serde_json::from_value(ig["metadata"]["annotations"].clone()).unwrap();
        let out = c.apply(&ig, &annotations);
        let conf = &out["spec"]["eks"]["configuration"];
        assert_eq!(conf["image"], "ami-0aaaaaaaaaaaaaaa1", "restricted: the default AMI replaces latest");
        assert_eq!(conf["securityGroups"], json!(["sg-0123456789abcdef0", "eks-node-shared"]));
        assert_eq!(tags_of(&out), [("cost-center".into(), "platform".into()), ("team".into(), "data-platform".into())]);
        assert_eq!(conf["roleName"], "prod-euw1-nodes");
        assert_eq!(conf["labels"], json!({"platform.example.com/managed": "true", "workload-class": "batch"}));
        assert_eq!(out["spec"]["strategy"], ig["spec"]["strategy"], "replace keeps the group's own strategy");
        assert_eq!(c.md5.len(), 32);
    }
}
