//! Embeds the browser UI: lists every file under `web/` (tests excluded) into
//! `$OUT_DIR/web_assets.rs` as `(name, include_bytes!(path))` pairs; and names the commit
//! the binary is built from (`WARDEN_COMMIT`, from `git rev-parse` when the source is a git
//! checkout, else `unknown`, or the `WARDEN_COMMIT` environment variable). No network I/O.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rustc-env=WARDEN_COMMIT={}", commit());
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("web");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    if root.is_dir() {
        collect(&root, &root, &mut files)?;
    }
    files.sort();
    let mut code = String::from("/// Every UI file: its path under `web/` and its bytes.\n");
    code.push_str("pub static WEB_ASSETS: &[(&str, &[u8])] = &[\n");
    for (name, path) in &files {
        code.push_str(&format!(
            "    ({name:?}, include_bytes!({:?})),\n",
            path.display().to_string()
        ));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("web_assets.rs");
    std::fs::write(out, code)?;
    Ok(())
}

/// The commit being built: `WARDEN_COMMIT` if set, else git's short hash, else `unknown`.
fn commit() -> String {
    println!("cargo:rerun-if-env-changed=WARDEN_COMMIT");
    if let Ok(commit) = std::env::var("WARDEN_COMMIT") {
        return commit;
    }
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        // A new commit or checkout changes HEAD or the ref it names.
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(head) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{head}");
        }
    }
    match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(hash) if !hash.is_empty() => hash,
        _ => "unknown".to_owned(),
    }
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        println!("cargo:rerun-if-changed={}", path.display());
        if path.is_dir() {
            collect(root, &path, files)?;
            continue;
        }
        let name = path
            .strip_prefix(root)
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .unwrap_or_default();
        if name.ends_with(".test.mjs") || name.starts_with('.') {
            continue;
        }
        files.push((name, path));
    }
    Ok(())
}
