//! Entry point: parse the command line, run it, turn errors into a message and exit code.

// Input from users, files and the network is never unwrapped; tests may.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use std::process::ExitCode;

fn main() -> ExitCode {
    match warden::cli::run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
