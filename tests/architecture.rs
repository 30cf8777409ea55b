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

/// What `check` finds in a probe file holding `text`, in a directory of its own that goes after.
fn with_probe<T>(tag: &str, text: &str, check: impl FnOnce(&PathBuf) -> T) -> T {
    let dir = std::env::temp_dir().join(format!("architecture-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("probe.rs");
    std::fs::write(&file, text).unwrap();
    let found = check(&file);
    std::fs::remove_dir_all(&dir).unwrap();
    found
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
    let found =
        offences(&files_under(&["workers", "instancegroup/reconciler.rs", "instancegroup/reconcile_managed.rs"]), &sdk);
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
    let io = Regex::new(r"\btokio::").unwrap();
    let found = with_probe(
        "check",
        "// tokio::spawn in a comment\nuse tokio::sync::Notify;\n#[cfg(test)]\nmod tests {\n    use tokio::time;\n}\n",
        |file| offences(std::slice::from_ref(file), &io),
    );
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
                // The test module's own modules (`tests.rs` beside `tests/`) are tests too.
                if dir.join(&m[3]).is_dir() {
                    files.extend(rust_files(&dir.join(&m[3])));
                }
            }
        }
    }
    files
}

/// The module a file of `root` is (`workers/drainer/mod.rs` is `["workers", "drainer"]`).
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let mut module: Vec<String> =
        file.strip_prefix(root).unwrap().with_extension("").iter().map(|c| c.to_string_lossy().into_owned()).collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        module.pop();
    }
    module
}

/// Skips blanks from `i`.
fn skip_blanks(s: &[u8], i: &mut usize) {
    while s.get(*i).is_some_and(u8::is_ascii_whitespace) {
        *i += 1;
    }
}

/// The paths one path expression at `i` names (a group `{a::X, b::{c, d}}` names each member), and
/// where it ends.
fn parse_path(s: &[u8], mut i: usize) -> (Vec<Vec<String>>, usize) {
    let mut prefix: Vec<String> = Vec::new();
    loop {
        skip_blanks(s, &mut i);
        if s.get(i) == Some(&b'{') {
            i += 1;
            let mut all = Vec::new();
            loop {
                skip_blanks(s, &mut i);
                if s.get(i).is_none_or(|c| *c == b'}') {
                    return (all, i + 1);
                }
                let (members, next) = parse_path(s, i);
                all.extend(members.into_iter().map(|m| prefix.iter().cloned().chain(m).collect()));
                i = next;
                // A rename (`X as Y`) or anything else up to the member's end.
                while s.get(i).is_some_and(|c| *c != b',' && *c != b'}') {
                    i += 1;
                }
                if s.get(i) == Some(&b',') {
                    i += 1;
                }
            }
        }
        let start = i;
        while s.get(i).is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_') {
            i += 1;
        }
        if start == i {
            return (vec![prefix], i);
        }
        prefix.push(String::from_utf8_lossy(&s[start..i]).into_owned());
        if s[i..].starts_with(b"::") {
            i += 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// Every path `file` names through `crate::` or `super::` (grouped members and `super::super::`
/// included), resolved to the crate's modules, with the line it starts on. Code only.
fn named_paths(root: &Path, file: &Path) -> Vec<(usize, Vec<String>)> {
    let head = Regex::new(r"\b(crate|super)::").unwrap();
    let mut text = String::new();
    let mut starts = Vec::new();
    for (n, line) in code_lines(file) {
        starts.push((text.len(), n));
        text.push_str(&line);
        text.push('\n');
    }
    let module = module_of(root, file);
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(m) = head.find_at(&text, at) {
        at = m.end();
        if text[..m.start()].ends_with("::") {
            continue;
        }
        let line = starts.iter().rev().find(|(offset, _)| *offset <= m.start()).map_or(0, |(_, n)| *n);
        let (paths, end) = parse_path(text.as_bytes(), m.start());
        at = at.max(end);
        for path in paths {
            let (base, rest): (Vec<String>, &[String]) = if path[0] == "crate" {
                (Vec::new(), &path[1..])
            } else {
                let ups = path.iter().take_while(|p| *p == "super").count();
                let Some(kept) = module.len().checked_sub(ups) else { continue };
                (module[..kept].to_vec(), &path[ups..])
            };
            let full: Vec<String> = base.into_iter().chain(rest.iter().filter(|p| *p != "self").cloned()).collect();
            if !full.is_empty() {
                found.push((line, full));
            }
        }
    }
    found
}

/// Every path the non-test files under `part` of `root` name, as (file shown, line, path).
fn paths_named_under(root: &Path, part: &str) -> Vec<(String, usize, Vec<String>)> {
    let path = root.join(part);
    if !path.exists() {
        return Vec::new();
    }
    let tests = test_only_files(root);
    let mut found = Vec::new();
    for file in rust_files(&path).into_iter().filter(|f| !tests.contains(f)) {
        let shown = file.strip_prefix(root).unwrap().display().to_string();
        found.extend(named_paths(root, &file).into_iter().map(|(n, named)| (shown.clone(), n, named)));
    }
    found
}

/// Every module of the crate a layer of `root` may not import, as `path:line: crate::module`.
fn crossing_imports(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for (part, layer) in LAYERS {
        for (shown, n, named) in paths_named_under(root, part) {
            let module = named[0].as_str();
            let allowed = match layer {
                Layer::Only(only) => only.contains(&module),
                Layer::Never(never) => !never.contains(&module),
            };
            if !allowed {
                found.push(format!("{shown}:{n}: crate::{}", named.join("::")));
            }
        }
    }
    found
}

/// What each section of `instancegroup/` may not import of it, by the names
/// `instancegroup/mod.rs` gives the section's modules: the pure sections no adapter and no
/// reconciler, the reconcilers no adapter, the adapters no reconciler.
const INSTANCEGROUP_SECTIONS: &[(&str, &[&str])] = &[
    (
        "instancegroup/domain",
        &["adapters", "aws", "k8s", "memory_cloud", "reconciler", "reconcile_managed", "controller"],
    ),
    (
        "instancegroup/ports",
        &["adapters", "aws", "k8s", "memory_cloud", "reconciler", "reconcile_managed", "controller"],
    ),
    ("instancegroup/reconciler.rs", &["adapters", "aws", "k8s", "controller"]),
    ("instancegroup/reconcile_managed.rs", &["adapters", "aws", "k8s", "controller"]),
    ("instancegroup/adapters", &["reconciler", "reconcile_managed", "controller"]),
];

/// Every import inside `instancegroup/` a section of `root` may not make, as `path:line: crate::…`.
fn crossing_sections(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for (part, never) in INSTANCEGROUP_SECTIONS {
        for (shown, n, named) in paths_named_under(root, part) {
            let section = named.get(1).map(String::as_str).unwrap_or_default();
            // `instancegroup::adapters::aws` and `instancegroup::aws` are the same adapter.
            let inner = named.get(2).map(String::as_str).unwrap_or_default();
            let reaches = |s: &str| never.contains(&s);
            if named[0] == "instancegroup" && (reaches(section) || (section == "adapters" && reaches(inner))) {
                found.push(format!("{shown}:{n}: crate::{}", named.join("::")));
            }
        }
    }
    found
}

/// The calls to a write port in `files` (the cluster's writes and Auto Scaling's), as
/// `path:line: text`.
fn write_port_calls(files: &[PathBuf]) -> Vec<String> {
    let write = Regex::new(
        r"\.(cordon|uncordon|evict|delete_pod|readmit_to_load_balancers|protect_from_scale_down|raise_desired|lower_unlaunched|terminate_instance|suspend_az_rebalance)\(",
    )
    .unwrap();
    offences(files, &write)
}

/// The module file `path` (`["workers", "scaler"]`) names under `root`, if it is a file of its own.
fn module_file(root: &Path, path: &[&str]) -> Option<PathBuf> {
    let joined: PathBuf = path.iter().collect();
    [root.join(&joined).with_extension("rs"), root.join(&joined).join("mod.rs")].into_iter().find(|p| p.exists())
}

/// The import circles among `root`'s files (each as the files around it): `super::x` and
/// `crate::a::b` paths resolved to files, leaving out the `mod.rs` files that only gather them.
fn import_circles(root: &Path) -> Vec<Vec<String>> {
    let tests = test_only_files(root);
    let files: Vec<PathBuf> = rust_files(root)
        .into_iter()
        .filter(|f| !tests.contains(f))
        .filter(|f| !matches!(f.file_name().and_then(|n| n.to_str()), Some("mod.rs" | "lib.rs" | "main.rs")))
        .collect();
    let name = |f: &Path| f.strip_prefix(root).unwrap().display().to_string();
    let mut edges: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> = Default::default();
    for file in &files {
        let targets = edges.entry(name(file)).or_default();
        for (_, named) in named_paths(root, file) {
            let named: Vec<&str> = named.iter().map(String::as_str).collect();
            // The longest prefix of the path that is a file of its own.
            let found =
                (1..=named.len()).rev().find_map(|k| module_file(root, &named[..k]).filter(|f| files.contains(f)));
            if let Some(target) = found.filter(|t| t != file) {
                targets.insert(name(&target));
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
fn each_section_of_instancegroup_imports_only_what_it_may() {
    let found = crossing_sections(&src());
    assert!(found.is_empty(), "imports across the InstanceGroup sections:\n{}", found.join("\n"));
}

#[test]
fn only_the_executor_calls_a_write_port() {
    let tests = test_only_files(&src());
    let gates = ["workers/execute.rs", "workers/leader_only.rs"];
    let workers: Vec<PathBuf> = files_under(&["workers"])
        .into_iter()
        .filter(|f| !tests.contains(f) && !gates.iter().any(|g| f.ends_with(g)))
        .collect();
    assert!(workers.len() > 15, "the worker files are found: {workers:?}");
    let found = write_port_calls(&workers);
    assert!(found.is_empty(), "workers that write around the executor:\n{}", found.join("\n"));
    // The ledger's one save is the executor's (`SharedLedger::update` is defined beside it).
    let saves = Regex::new(r"\.update\(").unwrap();
    let savers: Vec<PathBuf> = workers.into_iter().filter(|f| !f.ends_with("workers/ledger.rs")).collect();
    let found = offences(&savers, &saves);
    assert!(found.is_empty(), "workers that save the ledger around the executor:\n{}", found.join("\n"));
}

#[test]
fn a_write_around_the_executor_is_caught_and_a_write_value_is_not() {
    let found = with_probe(
        "writes",
        "fn f() {\n    ctx.executor().run(&Write::Cordon(node)).await;\n    ctx.writes.cordon(&node).await;\n    ctx\n        .aws\n        .terminate_instance(&i, true);\n}\n",
        |file| write_port_calls(std::slice::from_ref(file)),
    );
    let lines: Vec<&str> = found.iter().map(|f| f.rsplit(": ").next().unwrap()).collect();
    assert_eq!(lines, ["ctx.writes.cordon(&node).await;", ".terminate_instance(&i, true);"], "{found:?}");
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
    write("workers/drainer/ending.rs", "use crate::{\n    core::Node,\n    k8s::{writes::KubeWrites, Client},\n};\n");
    write("workers/drainer/mod.rs", "mod ending;\nfn f() { super::super::aws::Adapter::new(); }\n");
    write(
        "instancegroup/domain/plan.rs",
        "use super::super::adapters::aws::Cloud;\nuse crate::instancegroup::api::Spec;\n",
    );
    write("instancegroup/reconcile_managed.rs", "use crate::instancegroup::{k8s::Store, plan::Plan};\n");
    let crossing = crossing_imports(&root);
    let sections = crossing_sections(&root);
    let circles = import_circles(&root);
    std::fs::remove_dir_all(&root).unwrap();
    let crossed: Vec<&str> = crossing.iter().map(|c| c.split(':').next().unwrap()).collect();
    assert_eq!(
        crossed,
        vec![
            "core/a.rs",
            "workers/drainer/ending.rs",
            "workers/drainer/ending.rs",
            "workers/drainer/mod.rs",
            "instancegroup/reconciler.rs",
            "k8s/client.rs",
            "fakes.rs"
        ],
        "grouped members and super::super:: paths count: {crossing:#?}"
    );
    assert!(crossing[1].ends_with("crate::k8s::writes::KubeWrites") && crossing[2].ends_with("crate::k8s::Client"));
    let reached: Vec<&str> = sections.iter().map(|c| c.rsplit(": ").next().unwrap()).collect();
    assert_eq!(
        reached,
        ["crate::instancegroup::adapters::aws::Cloud", "crate::instancegroup::k8s::Store"],
        "the pure section reaches an adapter, the reconciler a Kubernetes store: {sections:#?}"
    );
    assert_eq!(
        circles,
        vec![
            vec!["core/a.rs".to_string(), "core/b.rs".to_string()],
            vec!["workers/boost_writes.rs".to_string(), "workers/scaler.rs".to_string()]
        ],
        "the test-only file and the comment count for nothing"
    );
}
