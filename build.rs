//! Embeds the browser UI: lists every file under `web/` (tests excluded) into
//! `$OUT_DIR/web_assets.rs` as `(name, include_bytes!(path))` pairs. No network I/O.

use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
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
