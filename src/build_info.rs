//! What this binary is: its version and the commit it was built from (set by `build.rs`).

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit built (git's short hash), or `unknown` outside a git checkout.
pub const COMMIT: &str = env!("WARDEN_COMMIT");
/// `warden --version`: `VERSION (commit COMMIT)`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("WARDEN_COMMIT"),
    ")"
);
