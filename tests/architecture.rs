//! The dependency rules of `docs/development.md`, checked on the sources: the decisions import no
//! I/O crate, the workers and the reconciler see no SDK or kube type, and the AWS and Kubernetes
//! adapters never import each other. Only code counts: comments and `#[cfg(test)]` modules are
//! left out.

use std::path::{Path, PathBuf};

use regex::Regex;

/// The InstanceGroup half's pure modules (the rest of `src/instancegroup/` executes or adapts).
const INSTANCEGROUP_PURE: &[&str] = &[
    "api.rs",
    "aws_auth.rs",
    "boundaries.rs",
    "cloud.rs",
    "crd_strategy.rs",
    "design.rs",
    "launch.rs",
    "plan.rs",
    "rolling.rs",
    "store.rs",
    "userdata.rs",
    "validate.rs",
];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, or `dir` itself when it is a file.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    if dir.is_file() {
        return vec![dir.to_path_buf()];
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The file's code lines, numbered: up to its `#[cfg(test)]` module, without comment lines.
fn code_lines(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = Vec::new();
    let mut numbered = text.lines().enumerate().peekable();
    while let Some((n, line)) = numbered.next() {
        let next_opens_tests = numbered.peek().is_some_and(|(_, l)| l.trim_start().starts_with("mod tests"));
        if line.trim() == "#[cfg(test)]" && next_opens_tests {
            break;
        }
        if !line.trim_start().starts_with("//") {
            lines.push((n + 1, line.to_string()));
        }
    }
    lines
}

/// Every line of `files` that matches `forbidden`, as `path:line: text`.
fn offences(files: &[PathBuf], forbidden: &Regex) -> Vec<String> {
    let root = src();
    files
        .iter()
        .flat_map(|path| {
            let shown = path.strip_prefix(&root).unwrap_or(path).display().to_string();
            code_lines(path)
                .into_iter()
                .filter(|(_, line)| forbidden.is_match(line))
                .map(move |(n, line)| format!("src/{shown}:{n}: {}", line.trim()))
        })
        .collect()
}

fn files_under(paths: &[&str]) -> Vec<PathBuf> {
    paths.iter().flat_map(|p| rust_files(&src().join(p))).collect()
}

#[test]
fn the_decisions_import_no_io_crate() {
    // `kube`'s derive of the custom resource (`kube::CustomResource`) is a macro, not I/O.
    let io = Regex::new(
        r"\b(tokio|aws_sdk_\w+|aws_config|aws_smithy_\w+|prometheus|tracing|reqwest|hyper|axum|k8s_openapi)::|\bkube::(api|runtime|client|Client|Api)\b",
    )
    .unwrap();
    let mut pure = files_under(&["core"]);
    pure.extend(INSTANCEGROUP_PURE.iter().map(|f| src().join("instancegroup").join(f)));
    assert!(pure.len() > INSTANCEGROUP_PURE.len() + 10, "the core's files are found: {pure:?}");
    assert!(pure.iter().all(|p| p.exists()), "every pure module named exists: {pure:?}");
    let found = offences(&pure, &io);
    assert!(found.is_empty(), "pure modules import I/O crates:\n{}", found.join("\n"));
}

#[test]
fn the_workers_and_the_reconciler_see_no_sdk_or_kube_type() {
    let sdk = Regex::new(r"\b(kube|k8s_openapi|aws_sdk_\w+|aws_config|aws_smithy_\w+)::").unwrap();
    let found = offences(&files_under(&["workers", "instancegroup/reconciler.rs"]), &sdk);
    assert!(found.is_empty(), "workers use SDK or kube types:\n{}", found.join("\n"));
}

#[test]
fn the_aws_and_kubernetes_adapters_never_import_each_other() {
    let kube_side = Regex::new(r"\b(kube|k8s_openapi)::|crate::(k8s|instancegroup::k8s)\b").unwrap();
    let found = offences(&files_under(&["aws", "instancegroup/aws"]), &kube_side);
    assert!(found.is_empty(), "AWS adapters import the Kubernetes side:\n{}", found.join("\n"));

    let aws_side =
        Regex::new(r"\b(aws_sdk_\w+|aws_config|aws_smithy_\w+)::|crate::(aws|instancegroup::aws)\b").unwrap();
    let found = offences(&files_under(&["k8s", "instancegroup/k8s.rs"]), &aws_side);
    assert!(found.is_empty(), "Kubernetes adapters import the AWS side:\n{}", found.join("\n"));
}

#[test]
fn a_forbidden_import_is_found_and_a_comment_or_test_is_not() {
    let dir = std::env::temp_dir().join(format!("architecture-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("probe.rs");
    std::fs::write(
        &file,
        "// tokio::spawn in a comment\nuse tokio::sync::Notify;\n#[cfg(test)]\nmod tests {\n    use tokio::time;\n}\n",
    )
    .unwrap();
    let io = Regex::new(r"\btokio::").unwrap();
    let found = offences(std::slice::from_ref(&file), &io);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].ends_with(":2: use tokio::sync::Notify;"), "{found:?}");
}
