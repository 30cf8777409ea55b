//! Command-line tools the tests drive (promtool, Chromium), installed on first use by
//! `scripts/install-apt-tool.sh`, so a fresh machine runs these tests instead of skipping them.

use std::fs::File;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The path of `command`, installing the Debian `package` that ships it when it is missing.
pub fn apt_tool(command: &str, package: &str) -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| root.join("target"));
    std::fs::create_dir_all(&target).expect("target dir");
    // apt takes one install at a time: test binaries that need tools wait for each other.
    let lock = File::create(target.join("apt-tools.lock")).expect("lock file");
    lock.lock().expect("lock the tool install");
    let out = Command::new(root.join("scripts/install-apt-tool.sh"))
        .args([command, package])
        .stderr(Stdio::inherit())
        .output()
        .expect("run install-apt-tool.sh");
    assert!(out.status.success(), "{command} is needed and could not be installed");
    PathBuf::from(String::from_utf8(out.stdout).expect("utf-8 path").trim())
}

/// A fresh, empty directory under the system's temporary directory for this test.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spots-booster-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}
