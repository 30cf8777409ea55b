//! `simulate --output html` writes one self-contained page, and a real browser (headless
//! Chromium, installed on first use) lays out every plotted line of both runs.

use std::fs::File;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::support::tools;

fn simulate_html(scenario: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_spots-booster"))
        .args(["simulate", "--scenario", scenario, "--baseline", "nth-ca", "-o", "html"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "no progress off a terminal: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs Chromium headless on a file, killed if it has not finished in two minutes. Its output
/// goes to files: a pipe nobody reads while we wait would fill and stall it.
fn chromium(page: &Path, dir: &Path, args: &[&str]) -> Output {
    let browser = tools::apt_tool("chromium", "chromium");
    let (stdout, stderr) = (dir.join("chromium.out"), dir.join("chromium.err"));
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", dir.join("profile").display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdout(File::create(&stdout).unwrap())
        .stderr(File::create(&stderr).unwrap())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish in two minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Output {
        status: child.wait().unwrap(),
        stdout: std::fs::read(stdout).unwrap(),
        stderr: std::fs::read(stderr).unwrap(),
    }
}

fn check(scenario: &str, groups: usize) {
    let html = simulate_html(scenario);
    for outside in ["http://", "https://", "<link", " src=", "@import", "url("] {
        assert!(!html.contains(outside), "the page must not fetch anything: it contains {outside:?}");
    }
    let dir = tools::scratch_dir(&format!("html-{groups}"));
    let page = dir.join("report.html");
    std::fs::write(&page, &html).unwrap();

    let dom = chromium(&page, &dir, &["--dump-dom"]);
    assert!(dom.status.success(), "{}", String::from_utf8_lossy(&dom.stderr));
    let dom = String::from_utf8_lossy(&dom.stdout);
    // Per run: one Ready line and one desired line per group, one Pending line; two runs.
    let lines = 2 * (2 * groups + 1);
    assert!(
        dom.contains(&format!("data-rendered=\"{lines}\"")),
        "Chromium should lay out {lines} lines: {}",
        dom.lines().find(|l| l.contains("<body")).unwrap_or("no <body>")
    );

    let png = dir.join("report.png");
    let shot = chromium(&page, &dir, &[&format!("--screenshot={}", png.display()), "--window-size=1250,1400"]);
    assert!(shot.status.success(), "{}", String::from_utf8_lossy(&shot.stderr));
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(size > 20_000, "a screenshot of charts is more than a blank page: {size} bytes");
}

#[test]
fn the_quickstart_wave_renders_in_a_browser() {
    check("examples/scenarios/rebalance-wave.yaml", 3);
}

#[test]
fn a_twenty_group_wave_renders_in_a_browser() {
    check("examples/scenarios/twenty-group-wave.yaml", 20);
}
