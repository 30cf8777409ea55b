//! The `crd` upgrade strategy, pure: render the templated custom resource with the InstanceGroup
//! in scope, name and annotate it, and decide the next step from the resources that exist.
//! Templates support what upstream's examples use, `{{ .InstanceGroup.Path.To.Field }}`; any
//! other template action is refused with its text rather than rendered wrongly.

use serde_json::Value;

use super::api::InstanceGroup;
use super::design::{Concurrency, CrdPlan};

/// Annotation marking resources the strategy submitted (upstream's value, so resources it left
/// behind are recognised).
pub(crate) const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "instance-manager");
/// Annotation naming the Auto Scaling Group a resource upgrades.
pub(crate) const UPGRADE_SCOPE: &str = "instancemgr.keikoproj.io/upgrade-scope";

/// The template could not become a resource.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RenderError {
    /// A `{{ … }}` action we do not evaluate.
    #[error(
        "spec.strategy.crd.spec: template action {0:?} is not supported (only {{{{ .InstanceGroup.Field.Path }}}})"
    )]
    Unsupported(String),
    /// A path that names no field.
    #[error("spec.strategy.crd.spec: {0:?} names no field of the InstanceGroup")]
    NoField(String),
    /// A path that names an object or a list: only scalar fields are substituted (the whole
    /// InstanceGroup holds the template itself, and would grow with every action).
    #[error("spec.strategy.crd.spec: {0:?} names an object or a list; only a field holding a string, number or boolean can be substituted")]
    NotScalar(String),
    /// The rendered resource would pass [`MAX_RENDERED_BYTES`]: refused before it is built.
    #[error("spec.strategy.crd.spec: the rendered resource would exceed {MAX_RENDERED_BYTES} bytes")]
    TooLarge,
    /// `{{` without `}}`.
    #[error("spec.strategy.crd.spec: unclosed template action")]
    Unclosed,
    /// The rendered text is not a YAML object with apiVersion and kind.
    #[error("spec.strategy.crd.spec: the rendered resource is not valid: {0}")]
    NotAResource(String),
    /// The resource names a namespace other than the InstanceGroup's: the daemon would create
    /// and delete objects there with its own rights, on behalf of someone who may have none.
    #[error(
        "spec.strategy.crd.spec: metadata.namespace {namespace:?} is not the InstanceGroup's namespace {own:?}; \
         the resource is created in the InstanceGroup's own namespace only"
    )]
    OtherNamespace {
        /// The namespace the template names.
        namespace: String,
        /// The InstanceGroup's.
        own: String,
    },
}

/// The most a rendered `crd` resource may take: far above any resource the API server stores
/// (etcd refuses objects over 1.5 MiB; a custom resource this size is already unusual), far below
/// the daemon's memory limit whatever the template repeats.
pub(crate) const MAX_RENDERED_BYTES: usize = 256 * 1024;

fn find<'a>(object: &'a Value, segment: &str) -> Option<&'a Value> {
    object.as_object()?.iter().find(|(k, _)| k.eq_ignore_ascii_case(segment)).map(|(_, v)| v)
}

/// Evaluates `.InstanceGroup.A.B` against the object's JSON; Go's embedded ObjectMeta makes
/// `.InstanceGroup.Name` mean `metadata.name`.
fn evaluate(object: &Value, path: &str) -> Result<String, RenderError> {
    let segments: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    if segments.first() != Some(&"InstanceGroup") {
        return Err(RenderError::Unsupported(path.to_string()));
    }
    let mut current = object;
    for (i, segment) in segments.iter().enumerate().skip(1) {
        let next = find(current, segment).or_else(|| match (i, *segment) {
            (1, "ObjectMeta") => object.get("metadata"),
            (1, _) => object.get("metadata").and_then(|m| find(m, segment)),
            _ => None,
        });
        current = next.ok_or_else(|| RenderError::NoField(path.to_string()))?;
    }
    match current {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Bool(_) | Value::Number(_) => Ok(current.to_string()),
        Value::Object(_) | Value::Array(_) => Err(RenderError::NotScalar(path.to_string())),
    }
}

/// Renders the template with the InstanceGroup in scope.
pub(crate) fn render(template: &str, ig: &InstanceGroup) -> Result<String, RenderError> {
    let object = serde_json::to_value(ig).expect("an InstanceGroup always serialises");
    let mut out = String::new();
    let mut rest = template;
    let push = |out: &mut String, piece: &str| {
        if out.len().saturating_add(piece.len()) > MAX_RENDERED_BYTES {
            return Err(RenderError::TooLarge);
        }
        out.push_str(piece);
        Ok(())
    };
    while let Some(start) = rest.find("{{") {
        push(&mut out, &rest[..start])?;
        let end = rest[start..].find("}}").ok_or(RenderError::Unclosed)? + start;
        let action = rest[start + 2..end].trim().trim_start_matches('-').trim_end_matches('-').trim();
        if !action.starts_with('.') || action.contains(char::is_whitespace) || action.contains('|') {
            return Err(RenderError::Unsupported(action.to_string()));
        }
        push(&mut out, &evaluate(&object, action)?)?;
        rest = &rest[end + 2..];
    }
    push(&mut out, rest)?;
    Ok(out)
}

/// The resource to submit: rendered, named `<name>-<launch id>` (or `instancemgr-<launch id>`
/// past 63 characters), annotated, in the InstanceGroup's namespace (upstream defaults to
/// `default` and lets the template name any namespace; here another namespace is refused).
pub fn resource(plan: &CrdPlan, ig: &InstanceGroup, asg: &str, launch_id: &str) -> Result<Value, RenderError> {
    let text = render(&plan.template, ig)?;
    let mut value: Value = crate::yaml_guard::read_yaml(&text).map_err(|e| RenderError::NotAResource(e.to_string()))?;
    if !value.is_object() || !value["apiVersion"].is_string() || !value["kind"].is_string() {
        return Err(RenderError::NotAResource("it needs apiVersion and kind".into()));
    }
    let metadata = &mut value["metadata"];
    if !metadata.is_object() {
        *metadata = Value::Object(Default::default());
    }
    let base =
        metadata["name"].as_str().or(metadata["generateName"].as_str()).unwrap_or("").trim_end_matches('-').to_string();
    let mut name = format!("{base}-{launch_id}");
    if base.is_empty() || name.len() > 63 {
        name = format!("instancemgr-{launch_id}");
    }
    let object = metadata.as_object_mut().expect("made an object above");
    object.remove("generateName");
    object.insert("name".into(), Value::String(name.to_ascii_lowercase()));
    let own = ig.metadata.namespace.as_deref().unwrap_or("default");
    match object.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty()) {
        Some(named) if named != own => {
            return Err(RenderError::OtherNamespace { namespace: named.to_string(), own: own.to_string() })
        }
        _ => {
            object.insert("namespace".into(), Value::String(own.to_string()));
        }
    }
    let annotations = object.entry("annotations").or_insert_with(|| Value::Object(Default::default()));
    if let Some(annotations) = annotations.as_object_mut() {
        annotations.insert(MANAGED_BY.0.into(), Value::String(MANAGED_BY.1.into()));
        annotations.insert(UPGRADE_SCOPE.into(), Value::String(asg.into()));
    }
    Ok(value)
}

/// The status string at a dotted path (`.status.currentStatus`).
pub(crate) fn status_at<'a>(object: &'a Value, path: &str) -> Option<&'a str> {
    path.trim_start_matches('.').split('.').filter(|s| !s.is_empty()).try_fold(object, |v, k| v.get(k))?.as_str()
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CrdStep {
    /// Submit this resource.
    Submit(Value),
    /// Delete these resources (names), then wait.
    Delete(Vec<String>),
    /// Our resource failed: delete it and count a retry.
    Retry(String),
    /// Retries are used up.
    Failed(String),
    /// Our resource succeeded.
    Done,
    /// Something is still running.
    Wait(String),
}

/// Decides the next step. `existing` are the resources of that kind in the namespace, `retries`
/// the retries used so far.
pub(crate) fn next_step(
    plan: &CrdPlan,
    wanted: Value,
    asg: &str,
    launch_id: &str,
    existing: &[Value],
    retries: u32,
) -> CrdStep {
    let name = wanted["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let status = |o: &Value| status_at(o, &plan.status_path).unwrap_or("").to_string();
    if let Some(ours) = existing.iter().find(|o| o["metadata"]["name"].as_str() == Some(name.as_str())) {
        let now = status(ours);
        return if now.eq_ignore_ascii_case(&plan.success) {
            CrdStep::Done
        } else if now.eq_ignore_ascii_case(&plan.failure) {
            match plan.max_retries {
                Some(max) if retries >= max => CrdStep::Failed(format!("{name} failed {} times", retries + 1)),
                _ => CrdStep::Retry(name),
            }
        } else {
            CrdStep::Wait(format!("{name} is {}", if now.is_empty() { "pending" } else { &now }))
        };
    }
    let active: Vec<&Value> = existing
        .iter()
        .filter(|o| {
            let annotations = &o["metadata"]["annotations"];
            annotations[MANAGED_BY.0] == MANAGED_BY.1 && annotations[UPGRADE_SCOPE] == asg
        })
        .filter(|o| {
            let s = status(o);
            !s.eq_ignore_ascii_case(&plan.success) && !s.eq_ignore_ascii_case(&plan.failure)
        })
        .collect();
    let names = |list: &[&Value]| {
        list.iter().filter_map(|o| o["metadata"]["name"].as_str().map(String::from)).collect::<Vec<_>>()
    };
    match plan.concurrency {
        Concurrency::Forbid if !active.is_empty() => {
            CrdStep::Wait(format!("{} still running", names(&active).join(", ")))
        }
        Concurrency::Replace if !active.is_empty() => {
            let stale: Vec<&Value> = active
                .iter()
                .copied()
                .filter(|o| !o["metadata"]["name"].as_str().unwrap_or("").ends_with(launch_id))
                .collect();
            if stale.is_empty() {
                CrdStep::Wait(format!("{} still running", names(&active).join(", ")))
            } else {
                CrdStep::Delete(names(&stale))
            }
        }
        _ => CrdStep::Submit(wanted),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ig() -> InstanceGroup {
        let mut ig: InstanceGroup = serde_yaml::from_str(include_str!("../testdata/batch-spot.yaml")).unwrap();
        ig.status = Some(crate::instancegroup::InstanceGroupStatus {
            active_scaling_group_name: "prod-euw1-instance-manager-batch-spot".into(),
            config_md5: "abc".into(),
            ..Default::default()
        });
        ig
    }

    fn plan(concurrency: Concurrency, max_retries: Option<u32>) -> CrdPlan {
        CrdPlan {
            crd_name: "rollingupgrades.upgrademgr.keikoproj.io".into(),
            template: "apiVersion: upgrademgr.keikoproj.io/v1alpha1\nkind: RollingUpgrade\nmetadata:\n  generateName: batch-spot\n  namespace: instance-manager\nspec:\n  asgName: {{ .InstanceGroup.Status.ActiveScalingGroupName }}\n  owner: {{.InstanceGroup.Name}}\n  md5: {{ .InstanceGroup.Status.ConfigMD5 }}\n".into(),
            status_path: ".status.currentStatus".into(),
            success: "completed".into(),
            failure: "error".into(),
            concurrency,
            max_retries,
        }
    }

    fn with_status(mut resource: Value, status: &str) -> Value {
        resource["status"] = json!({"currentStatus": status});
        resource
    }

    #[test]
    fn the_template_renders_fields_by_their_go_names() {
        let text = render(&plan(Concurrency::Forbid, Some(3)).template, &ig()).unwrap();
        assert!(text.contains("asgName: prod-euw1-instance-manager-batch-spot\n"), "{text}");
        assert!(text.contains("owner: batch-spot\n"), "ObjectMeta fields are promoted as in Go: {text}");
        assert!(text.contains("md5: abc\n"));
        assert_eq!(render("{{ if .X }}", &ig()), Err(RenderError::Unsupported("if .X".into())));
        assert_eq!(render("{{ .InstanceGroup.Nope }}", &ig()), Err(RenderError::NoField(".InstanceGroup.Nope".into())));
        assert_eq!(render("{{ .InstanceGroup.Name", &ig()), Err(RenderError::Unclosed));
    }

    #[test]
    fn only_scalars_are_substituted_and_the_rendered_size_is_capped_before_it_is_built() {
        let ig = ig();
        for whole in ["{{ .InstanceGroup }}", "{{ .InstanceGroup.Spec }}", "{{ .InstanceGroup.Metadata }}"] {
            assert!(matches!(render(whole, &ig), Err(RenderError::NotScalar(_))), "{whole}");
        }
        // A 64 KiB template that repeats itself: refused, never rendered to hundreds of MB.
        let mut big = ig.clone();
        let action = "{{ .InstanceGroup.Spec.Strategy.Crd.Spec }}";
        let template = action.repeat(64 * 1024 / action.len());
        big.spec.strategy = Some(crate::instancegroup::api::UpgradeStrategy {
            strategy_type: Some("crd".into()),
            crd: Some(crate::instancegroup::api::CrdStrategy { spec: template.clone(), ..Default::default() }),
            ..Default::default()
        });
        assert_eq!(render(&template, &big), Err(RenderError::TooLarge));
        let text = RenderError::TooLarge.to_string();
        assert!(text.contains("spec.strategy.crd.spec") && text.contains("262144"), "{text}");
    }

    #[test]
    fn the_resource_is_named_for_the_launch_and_annotated_with_its_scope() {
        let r = resource(&plan(Concurrency::Forbid, Some(3)), &ig(), "asg-1", "20261121-2").unwrap();
        assert_eq!(r["metadata"]["name"], "batch-spot-20261121-2");
        assert_eq!(r["metadata"]["namespace"], "instance-manager");
        assert!(r["metadata"].get("generateName").is_none());
        assert_eq!(r["metadata"]["annotations"][UPGRADE_SCOPE], "asg-1");
        assert_eq!(r["metadata"]["annotations"][MANAGED_BY.0], "instance-manager");
        let mut elsewhere = ig();
        elsewhere.metadata.namespace = Some("tenant-a".into());
        assert_eq!(
            resource(&plan(Concurrency::Forbid, Some(3)), &elsewhere, "asg-1", "1"),
            Err(RenderError::OtherNamespace { namespace: "instance-manager".into(), own: "tenant-a".into() }),
            "a template never reaches into another namespace"
        );
        let mut unnamed = plan(Concurrency::Forbid, Some(3));
        unnamed.template = unnamed.template.replace("  namespace: instance-manager\n", "");
        assert_eq!(resource(&unnamed, &elsewhere, "asg-1", "1").unwrap()["metadata"]["namespace"], "tenant-a");
        let long = "x".repeat(60);
        let r = resource(&plan(Concurrency::Forbid, Some(3)), &ig(), "asg-1", &long).unwrap();
        assert_eq!(r["metadata"]["name"], format!("instancemgr-{long}"));
        let mut bad = plan(Concurrency::Forbid, Some(3));
        bad.template = "just: text".into();
        assert!(matches!(resource(&bad, &ig(), "a", "1"), Err(RenderError::NotAResource(_))));
        bad.template = format!("apiVersion: v1\nkind: Pod\nspec: {}", "{a: ".repeat(60_000));
        let err = resource(&bad, &ig(), "a", "1").unwrap_err().to_string();
        assert!(
            err.starts_with("spec.strategy.crd.spec: the rendered resource is not valid: nested 60000 levels"),
            "{err}"
        );
    }

    #[test]
    fn steps_follow_status_retries_and_the_concurrency_policy() {
        let p = plan(Concurrency::Forbid, Some(1));
        let wanted = resource(&p, &ig(), "asg-1", "t-2").unwrap();
        assert_eq!(next_step(&p, wanted.clone(), "asg-1", "t-2", &[], 0), CrdStep::Submit(wanted.clone()));
        let ours = |s: &str| vec![with_status(wanted.clone(), s)];
        assert_eq!(next_step(&p, wanted.clone(), "asg-1", "t-2", &ours("completed"), 0), CrdStep::Done);
        assert_eq!(
            next_step(&p, wanted.clone(), "asg-1", "t-2", &ours("running"), 0),
            CrdStep::Wait("batch-spot-t-2 is running".into())
        );
        assert_eq!(
            next_step(&p, wanted.clone(), "asg-1", "t-2", &ours("error"), 0),
            CrdStep::Retry("batch-spot-t-2".into())
        );
        assert!(matches!(next_step(&p, wanted.clone(), "asg-1", "t-2", &ours("error"), 1), CrdStep::Failed(_)));
        let forever = plan(Concurrency::Forbid, None);
        assert_eq!(
            next_step(&forever, wanted.clone(), "asg-1", "t-2", &ours("error"), 99),
            CrdStep::Retry("batch-spot-t-2".into())
        );

        let older = with_status(resource(&p, &ig(), "asg-1", "t-1").unwrap(), "running");
        let other_group = with_status(resource(&p, &ig(), "asg-2", "t-1").unwrap(), "running");
        let existing = vec![older.clone(), other_group];
        assert!(
            matches!(next_step(&p, wanted.clone(), "asg-1", "t-2", &existing, 0), CrdStep::Wait(_)),
            "forbid waits"
        );
        let replace = plan(Concurrency::Replace, Some(3));
        assert_eq!(
            next_step(&replace, wanted.clone(), "asg-1", "t-2", &existing, 0),
            CrdStep::Delete(vec!["batch-spot-t-1".into()]),
            "replace deletes the older run of this group only"
        );
        let allow = plan(Concurrency::Allow, Some(3));
        assert_eq!(next_step(&allow, wanted.clone(), "asg-1", "t-2", &existing, 0), CrdStep::Submit(wanted));
    }
}
