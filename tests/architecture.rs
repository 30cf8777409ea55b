//! The dependency rules of `docs/development.md`, checked on the sources: the decisions import no
//! I/O crate, the workers and the reconciler see no SDK or kube type, and the AWS and Kubernetes
//! adapters never import each other. Only code counts: comments and `#[cfg(test)]` modules are
//! left out.

use std::path::{Path, PathBuf};

use regex::Regex;

/// The InstanceGroup half's pure sections (the rest of `src/instancegroup/` executes or adapts).
const INSTANCEGROUP_PURE: &[&str] = &["instancegroup/domain", "instancegroup/ports"];

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
    // A rule over a path that moved would hold over nothing.
    paths
        .iter()
        .flat_map(|p| {
            assert!(src().join(p).exists(), "src/{p} does not exist: a rule names a path that moved");
            rust_files(&src().join(p))
        })
        .collect()
}

#[test]
fn the_decisions_import_no_io_crate() {
    // `kube`'s derive of the custom resource (`kube::CustomResource`) is a macro, not I/O.
    let io = Regex::new(
        r"\b(tokio|aws_sdk_\w+|aws_config|aws_smithy_\w+|prometheus|tracing|reqwest|hyper|axum|k8s_openapi)::|\bkube::(api|runtime|client|Client|Api)\b",
    )
    .unwrap();
    let mut pure = files_under(&["core"]);
    let core = pure.len();
    pure.extend(files_under(INSTANCEGROUP_PURE));
    assert!(core > 10 && pure.len() > core + 10, "the pure files are found: {pure:?}");
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
    let found = offences(&files_under(&["aws", "instancegroup/adapters/aws"]), &kube_side);
    assert!(found.is_empty(), "AWS adapters import the Kubernetes side:\n{}", found.join("\n"));

    let aws_side =
        Regex::new(r"\b(aws_sdk_\w+|aws_config|aws_smithy_\w+)::|crate::(aws|instancegroup::aws)\b").unwrap();
    let found = offences(&files_under(&["k8s", "instancegroup/adapters/k8s.rs"]), &aws_side);
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

/// What each part of the crate may not import of the crate itself (`crate::<module>`): the core
/// nothing but itself, the ports the core, the workers no adapter and no command, the
/// InstanceGroup half no booster worker, the adapters not each other, the test kit no command.
const LAYERS: &[(&str, Layer)] = &[
    ("core", Layer::Only(&["core"])),
    ("ports", Layer::Only(&["core", "ports"])),
    (
        "workers",
        Layer::Never(&["aws", "k8s", "instancegroup", "simulate", "fakes", "app", "admin", "config", "inspect"]),
    ),
    ("instancegroup", Layer::Never(&["workers", "simulate", "fakes", "app", "inspect"])),
    ("aws", Layer::Never(&["k8s", "instancegroup", "workers", "simulate", "fakes", "app", "inspect"])),
    ("k8s", Layer::Never(&["aws", "instancegroup", "workers", "simulate", "fakes", "app", "inspect"])),
    ("fakes.rs", Layer::Never(&["simulate", "app", "inspect"])),
];

#[derive(Clone, Copy)]
enum Layer {
    /// It may import only these modules of the crate.
    Only(&'static [&'static str]),
    /// It may import any module of the crate but these.
    Never(&'static [&'static str]),
}

/// The files of `root` only a `#[cfg(test)] mod x;` declares: tests, held to no layer.
fn test_only_files(root: &Path) -> Vec<PathBuf> {
    let declared = Regex::new(r"^\s*(pub(\([a-z]+\))?\s+)?mod\s+([a-z_0-9]+);").unwrap();
    let mut files = Vec::new();
    for file in rust_files(root) {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let dir = match file.file_name().and_then(|n| n.to_str()) {
            Some("mod.rs" | "lib.rs") => file.parent().unwrap().to_path_buf(),
            _ => file.with_extension(""),
        };
        for (i, line) in lines.iter().enumerate() {
            let Some(m) = declared.captures(line) else { continue };
            if i > 0 && lines[i - 1].trim() == "#[cfg(test)]" {
                files.push(dir.join(format!("{}.rs", &m[3])));
                files.push(dir.join(&m[3]).join("mod.rs"));
            }
        }
    }
    files
}

/// Every `crate::<module>` a layer of `root` may not import, as `path:line: text`.
fn crossing_imports(root: &Path) -> Vec<String> {
    let used = Regex::new(r"\bcrate::([a-z_0-9]+)").unwrap();
    let tests = test_only_files(root);
    let mut found = Vec::new();
    for (part, layer) in LAYERS {
        let path = root.join(part);
        if !path.exists() {
            continue;
        }
        for file in rust_files(&path).into_iter().filter(|f| !tests.contains(f)) {
            let shown = file.strip_prefix(root).unwrap().display().to_string();
            for (n, line) in code_lines(&file) {
                for m in used.captures_iter(&line) {
                    let module = &m[1];
                    let allowed = match layer {
                        Layer::Only(only) => only.contains(&module),
                        Layer::Never(never) => !never.contains(&module),
                    };
                    if !allowed {
                        found.push(format!("{shown}:{n}: crate::{module} in {}", line.trim()));
                    }
                }
            }
        }
    }
    found
}

/// The module file `path` (`["workers", "scaler"]`) names under `root`, if it is a file of its own.
fn module_file(root: &Path, path: &[&str]) -> Option<PathBuf> {
    let joined: PathBuf = path.iter().collect();
    [root.join(&joined).with_extension("rs"), root.join(&joined).join("mod.rs")].into_iter().find(|p| p.exists())
}

/// The import circles among `root`'s files (each as the files around it): `super::x` and
/// `crate::a::b` paths resolved to files, leaving out the `mod.rs` files that only gather them.
fn import_circles(root: &Path) -> Vec<Vec<String>> {
    let path = Regex::new(r"\b(crate|super)((?:::[a-z_0-9]+)+)").unwrap();
    let tests = test_only_files(root);
    let files: Vec<PathBuf> = rust_files(root)
        .into_iter()
        .filter(|f| !tests.contains(f))
        .filter(|f| !matches!(f.file_name().and_then(|n| n.to_str()), Some("mod.rs" | "lib.rs" | "main.rs")))
        .collect();
    let name = |f: &Path| f.strip_prefix(root).unwrap().display().to_string();
    let mut edges: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for file in &files {
        let module: Vec<String> = file
            .strip_prefix(root)
            .unwrap()
            .with_extension("")
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        let targets = edges.entry(name(file)).or_default();
        for (_, line) in code_lines(file) {
            for m in path.captures_iter(&line) {
                let rest: Vec<&str> = m[2].trim_start_matches("::").split("::").collect();
                let base: Vec<&str> = match &m[1] {
                    "crate" => Vec::new(),
                    _ => module[..module.len() - 1].iter().map(String::as_str).collect(),
                };
                // The longest prefix of the path that is a file of its own.
                let found = (1..=rest.len()).rev().find_map(|k| {
                    let full: Vec<&str> = base.iter().copied().chain(rest[..k].iter().copied()).collect();
                    module_file(root, &full).filter(|f| files.contains(f))
                });
                if let Some(target) = found.filter(|t| t != file) {
                    targets.insert(name(&target));
                }
            }
        }
    }
    // Every elementary circle, found once from its smallest file.
    let mut circles = Vec::new();
    for start in edges.keys() {
        let mut stack = vec![(start.clone(), vec![start.clone()])];
        while let Some((at, trail)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    circles.push(trail.clone());
                } else if next > start && !trail.contains(next) {
                    let mut longer = trail.clone();
                    longer.push(next.clone());
                    stack.push((next.clone(), longer));
                }
            }
        }
    }
    circles
}

#[test]
fn each_layer_imports_only_what_lies_beneath_it() {
    let found = crossing_imports(&src());
    assert!(found.is_empty(), "imports that run back up the layers:\n{}", found.join("\n"));
}

#[test]
fn no_two_files_import_each_other_even_around_a_circle() {
    let circles = import_circles(&src());
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.iter().map(|c| c.join(" -> ")).collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn a_probe_that_runs_back_up_the_layers_or_around_a_circle_is_caught() {
    let root = std::env::temp_dir().join(format!("architecture-layers-{}", std::process::id()));
    let write = |path: &str, text: &str| {
        let file = root.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    };
    write("core/mod.rs", "mod a;\nmod b;\n#[cfg(test)]\nmod c;\n");
    write("core/a.rs", "use crate::metrics::Metrics;\nuse super::b::B;\npub struct A;\n");
    write("core/b.rs", "use super::a::A;\npub struct B;\n");
    write("core/c.rs", "use crate::fakes::Rig;\n");
    write("instancegroup/reconciler.rs", "use crate::workers::Clock;\n");
    write("k8s/client.rs", "fn f() { crate::instancegroup::aws_auth::NAME; }\n");
    write("fakes.rs", "pub use crate::simulate::ledger::MemoryLedger;\n");
    write("workers/scaler.rs", "use super::boost_writes::Flight;\n// use crate::aws::Client;\n");
    write("workers/boost_writes.rs", "use super::scaler::ScalerError;\n");
    let crossing = crossing_imports(&root);
    let circles = import_circles(&root);
    std::fs::remove_dir_all(&root).unwrap();
    let crossed: Vec<&str> = crossing.iter().map(|c| c.split(':').next().unwrap()).collect();
    assert_eq!(crossed, vec!["core/a.rs", "instancegroup/reconciler.rs", "k8s/client.rs", "fakes.rs"], "{crossing:#?}");
    assert_eq!(
        circles,
        vec![
            vec!["core/a.rs".to_string(), "core/b.rs".to_string()],
            vec!["workers/boost_writes.rs".to_string(), "workers/scaler.rs".to_string()]
        ],
        "the test-only file and the comment count for nothing"
    );
}
