//! Build facts for `/version`: the commit (when built from a git checkout), the tree state
//! (`GIT_TREE_STATE`, when the builder sets it), the build date (`SOURCE_DATE_EPOCH` when set,
//! for reproducible builds, else now) and the compiler's version.

use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-env-changed=GIT_TREE_STATE");
    // A new commit moves the branch HEAD names (never watch the index: `git status` rewrites
    // it, which would rebuild this crate over and over).
    let git = Path::new("../../.git");
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD")) {
        println!("cargo:rerun-if-changed=../../.git/HEAD");
        if let Some(branch) = head.trim().strip_prefix("ref: ") {
            println!("cargo:rerun-if-changed=../../.git/{branch}");
        }
    }
    let commit = output("git", &["rev-parse", "HEAD"]).unwrap_or_default();
    // `clean` or `dirty` when the builder says so (as Kubernetes' release scripts do).
    let tree_state = std::env::var("GIT_TREE_STATE").unwrap_or_default();
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
        });
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let rustc_version = output(&rustc, &["--version"]).unwrap_or_default();
    println!("cargo:rustc-env=APISERVER_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=APISERVER_GIT_TREE_STATE={tree_state}");
    println!("cargo:rustc-env=APISERVER_BUILD_DATE={}", rfc3339(epoch));
    println!("cargo:rustc-env=APISERVER_RUSTC_VERSION={rustc_version}");
}

/// A command's trimmed stdout, when it ran and succeeded.
fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Seconds since the Unix epoch as `YYYY-MM-DDTHH:MM:SSZ` (the civil-from-days algorithm).
fn rfc3339(secs: i64) -> String {
    let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}
