//! Command-line tools the tests drive (moto, promtool, Chromium), installed on first use by the
//! scripts under `scripts/`, so a fresh machine runs these tests instead of skipping them.

#![allow(dead_code)]

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Runs `scripts/<script> <args>` once at a time across test binaries (under `<target>/<lock>`)
/// and returns the path it prints: the installed tool.
pub fn install(script: &str, args: &[&str], lock: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    std::fs::create_dir_all(&target).expect("target dir");
    // Several test binaries may install at once: one does, the others wait.
    let lock = File::create(target.join(lock)).expect("lock file");
    lock.lock().expect("lock the install");
    let out = Command::new(root.join("scripts").join(script))
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    assert!(out.status.success(), "{script} {args:?} failed: the tool is needed and could not be installed");
    PathBuf::from(String::from_utf8(out.stdout).expect("utf-8 path").trim())
}

/// The path of `command`, installing the Debian `package` that ships it when it is missing.
pub fn apt_tool(command: &str, package: &str) -> PathBuf {
    // apt takes one install at a time.
    install("install-apt-tool.sh", &[command, package], "apt-tools.lock")
}

/// A fresh, empty directory under the system's temporary directory for this test.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spots-booster-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}
