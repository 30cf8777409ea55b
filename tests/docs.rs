//! The documentation as a reader meets it: a README that fits (about 8 KB), every relative link
//! resolving to a file in the repository, and no link that leaves it.

use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![Path::new(ROOT).join("README.md")];
    let mut docs: Vec<PathBuf> =
        std::fs::read_dir(Path::new(ROOT).join("docs")).unwrap().map(|e| e.unwrap().path()).collect();
    docs.sort();
    pages.extend(docs.into_iter().filter(|p| p.extension().is_some_and(|e| e == "md")));
    pages
}

#[test]
fn the_readme_fits_and_points_at_every_page_of_docs() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    assert!(readme.len() <= 9 * 1024, "README.md is {} bytes; the rest belongs in docs/", readme.len());
    for page in pages().iter().skip(1) {
        let name = format!("docs/{}", page.file_name().unwrap().to_str().unwrap());
        assert!(readme.contains(&format!("]({name})")), "README.md does not link {name}");
    }
    for section in ["## Guarantees", "## Quickstart", "## Install", "## Key flags"] {
        assert!(readme.contains(section), "README.md has no {section:?}");
    }
}

#[test]
fn links_stay_in_the_repository_and_resolve() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut links = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let shown = page.strip_prefix(ROOT).unwrap().display().to_string();
        assert!(!text.contains("https://"), "{shown} links outside the repository");
        for line in text.lines().filter(|l| l.contains("http://")) {
            assert!(line.contains("http://127.0.0.1"), "{shown} links outside the repository: {line}");
        }
        for target in link.captures_iter(&text).map(|c| c[1].to_string()) {
            let file = target.split('#').next().unwrap();
            let resolved = page.parent().unwrap().join(file);
            assert!(resolved.exists(), "{shown} links {target}, which does not exist");
            assert!(
                resolved.canonicalize().unwrap().starts_with(Path::new(ROOT).canonicalize().unwrap()),
                "{shown} links {target}, outside the repository"
            );
            links += 1;
        }
    }
    assert!(links >= 10, "{links} links");
}

#[test]
fn every_node_event_reason_is_documented() {
    let design = std::fs::read_to_string(Path::new(ROOT).join("docs/design.md")).unwrap();
    for reason in spots_booster::ports::NodeEventReason::ALL {
        assert!(design.contains(&format!("`{}`", reason.as_str())), "Event reason {reason:?} is not in docs/design.md");
    }
}

#[test]
fn every_metric_label_value_is_documented() {
    use spots_booster::metrics::{
        BoostOutcome, DrainOutcome, EvictionOutcome, GiveBackOutcome, LeaseChange, ParseSource, ReconcileResult,
        SkippedAction,
    };
    let operations = std::fs::read_to_string(Path::new(ROOT).join("docs/operations.md")).unwrap();
    let values: Vec<&str> = [
        BoostOutcome::ALL.iter().map(|v| v.as_str()).collect::<Vec<_>>(),
        GiveBackOutcome::ALL.iter().map(|v| v.as_str()).collect(),
        DrainOutcome::ALL.iter().map(|v| v.as_str()).collect(),
        EvictionOutcome::ALL.iter().map(|v| v.as_str()).collect(),
        ParseSource::ALL.iter().map(|v| v.as_str()).collect(),
        spots_booster::core::Distrust::ALL.iter().map(|v| v.as_str()).collect(),
        SkippedAction::ALL.iter().map(|v| v.as_str()).collect(),
        LeaseChange::ALL.iter().map(|v| v.as_str()).collect(),
        ReconcileResult::ALL.iter().map(|v| v.as_str()).collect(),
    ]
    .concat();
    for value in values {
        assert!(operations.contains(&format!("`{value}`")), "label value {value} is not in docs/operations.md");
    }
}
